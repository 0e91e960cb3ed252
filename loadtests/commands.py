"""The load-testing tools' ``kronos`` subcommands, registered with the core's command line through
the entry point ``[project.entry-points."kronos.commands"] loadtests =
"loadtests.commands:COMMANDS"`` (pyproject.toml). Same shape as ``kronos_core.cli.COMMANDS``: name
-> (module, one-line help); each module has ``add_arguments(parser)`` and ``run(args)``. Importing
this module imports nothing else."""

COMMANDS: dict[str, tuple[str, str]] = {
    "bench service": (
        "loadtests.bench", "benchmark the service over HTTP against the engine called directly",
    ),
    "bench portfolio": (
        "loadtests.bench_portfolio",
        "a portfolio forecast at the model's defaults against this machine's arithmetic limit "
        "(engine in-process; --service adds the request through the service); exits 1 when a "
        "goal is missed",
    ),
    "bench mixed": (
        "loadtests.bench_mixed",
        "small requests beside big ones, mixed load and the first request "
        "after ready, through the service (step scheduler goals)",
    ),
    "bench ledger": (
        "loadtests.bench_ledger",
        "forecast-ledger overhead on a large request (recorded vs not, "
        "same run) and its disk per 1,000 forecasts",
    ),
    "bench overload": (
        "loadtests.bench_overload",
        "goodput under overload: a few users, then ten times as many careless ones, one "
        "replica; exits 1 when a goal is missed",
    ),
    "loadtest": (
        "loadtests.run", "headless locust load test against a local service (loopback only)",
    ),
    "soak": (
        "loadtests.soak",
        "long steady load test: memory/FD trends of every service process, optional "
        "replica-kill chaos (loopback only)",
    ),
}
