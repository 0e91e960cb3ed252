"""The service's ``kronos`` subcommand, registered with the core's command line through the
entry point ``[project.entry-points."kronos.commands"] service = "service.commands:COMMANDS"``
(pyproject.toml). Same shape as ``kronos_core.cli.COMMANDS``: name -> (module, one-line help);
each module has ``add_arguments(parser)`` and ``run(args)``. Importing this module imports
nothing else. The tools that drive the service (``bench service``, ``loadtest``, ``soak``)
register theirs in ``loadtests/commands.py``."""

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("service.cli", "start the forecasting service (Ray Serve + FastAPI)"),
}
