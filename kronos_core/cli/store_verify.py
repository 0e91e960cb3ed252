"""``kronos store verify DIR`` (see ``kronos_core.cli.store_housekeeping``)."""

from kronos_core.cli.store_housekeeping import add_verify_arguments as add_arguments
from kronos_core.cli.store_housekeeping import run_verify as run

__all__ = ["add_arguments", "run"]
