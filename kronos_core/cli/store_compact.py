"""``kronos store compact DIR`` (see ``kronos_core.cli.store_housekeeping``)."""

from kronos_core.cli.store_housekeeping import add_compact_arguments as add_arguments
from kronos_core.cli.store_housekeeping import run_compact as run

__all__ = ["add_arguments", "run"]
