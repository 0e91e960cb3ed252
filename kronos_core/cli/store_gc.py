"""``kronos store gc DIR`` (see ``kronos_core.cli.store_housekeeping``)."""

from kronos_core.cli.store_housekeeping import add_gc_arguments as add_arguments
from kronos_core.cli.store_housekeeping import run_gc as run

__all__ = ["add_arguments", "run"]
