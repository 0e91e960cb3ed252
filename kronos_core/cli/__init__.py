"""The ``kronos`` command line.

Each subcommand lives in its own module with two functions:

* ``add_arguments(parser)``: declare the subcommand's flags on an argparse parser;
* ``run(args) -> int``: do the work and return the process exit code.

Modules are imported only when their subcommand runs, so ``kronos forecast``
never pays for importing Ray or FastAPI.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "forecast": ("kronos_core.cli.forecast", "forecast the next candles of a CSV file"),
    "bench": ("kronos_core.cli.bench", "benchmark the cached engine against full recompute"),
    "plan": ("kronos_core.cli.plan", "plan memory, batch size and time of training or inference"),
    "import": ("kronos_core.data.cli_import", "import CSV/Parquet candles into an Arrow store"),
    "sample-store": ("kronos_core.data.cli_sample_store", "generate a synthetic sample store"),
    "bench-store": ("kronos_core.data.cli_bench_store", "benchmark store reads against CSV"),
    "train": ("kronos_core.cli.train", "train the tokenizer or predictor (or the bundled default model)"),
    "serve": ("service.cli", "start the forecasting service (Ray Serve + FastAPI)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kronos", description="Kronos portfolio forecasting")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    # Parse only the leading options and the command name; the command's own
    # parser handles the rest after its module is imported.
    idx = next((i for i, a in enumerate(argv) if a in COMMANDS), None)
    if idx is None:
        top.parse_args(argv)  # handles --help
        top.print_help()
        return 2
    top_args = top.parse_args(argv[: idx + 1])
    logging.basicConfig(
        level=logging.DEBUG if top_args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    name = argv[idx]
    module_path, help_text = COMMANDS[name]
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        print(f"kronos {name}: unavailable ({exc}); is the right extra installed?", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"kronos {name}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(argv[idx + 1 :])
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
