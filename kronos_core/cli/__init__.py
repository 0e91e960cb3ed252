"""The ``kronos`` command line.

Each subcommand lives in its own module with two functions:

* ``add_arguments(parser)``: declare the subcommand's flags on an argparse parser;
* ``run(args) -> int``: do the work and return the process exit code;
* optionally ``requires(args) -> list[Need]``: the optional packages these flags need
  (``kronos_core.cli.requirements``), checked before ``run``, so a missing one is named at
  once with the line that installs it.

Modules are imported only when their subcommand runs, so ``kronos forecast``
never pays for importing Ray or FastAPI.

Commands are the core's own (``COMMANDS``) plus those other installed packages register
under the entry-point group ``kronos.commands``: each entry point names a table like
``COMMANDS`` (``service.commands:COMMANDS`` adds ``serve``;
``loadtests.commands:COMMANDS`` adds ``bench service``, ``loadtest`` and ``soak``). The core never
names those packages' modules. A command name may have two words (``bench store``); ``kronos bench``
alone is ``kronos bench engine``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib import metadata

ENTRY_POINT_GROUP = "kronos.commands"

# name -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "forecast": ("kronos_core.cli.forecast", "forecast the next candles of a CSV file"),
    "plan": ("kronos_core.cli.plan", "plan memory, batch size and time of training or inference"),
    "import": ("kronos_core.cli.data_import", "import CSV/Parquet candles into an Arrow store"),
    "store verify": (
        "kronos_core.cli.store_verify",
        "check a store: files readable, sorted, metadata consistent",
    ),
    "store compact": ("kronos_core.cli.store_compact", "write a store's read snapshots"),
    "store gc": (
        "kronos_core.cli.store_gc",
        "remove temporary files, empty locks and unpublished or superseded versions",
    ),
    "sample-store": ("kronos_core.cli.sample_store", "generate a synthetic sample store"),
    "train": (
        "kronos_core.cli.train", "train the tokenizer or predictor (or the bundled default model)",
    ),
    "bench engine": ("kronos_core.cli.bench", "benchmark the cached engine against full recompute"),
    "bench store": ("kronos_core.cli.bench_store", "benchmark store reads against CSV"),
    "eval": (
        "kronos_core.cli.eval",
        "walk-forward evaluation against baselines (metrics, regimes, plots)",
    ),
    "calibrate": (
        "kronos_core.cli.calibrate",
        "fit conformal (CQR / ACI) corrections of the forecast quantiles",
    ),
    "tune-sampling": (
        "kronos_core.cli.tune_sampling",
        "choose a model's sampling settings (temperature, top-p, mean or median) on validation "
        "windows and store them in its kronos.json",
    ),
    "tune-moves": (
        "kronos_core.cli.tune_moves",
        "fit a model's move correction (centre shrink and spread scale per step) on "
        "training-period windows and store it in its kronos.json",
    ),
    "backtest": ("kronos_core.cli.backtest", "walk-forward top-k portfolio backtest with costs"),
    "score": ("kronos_core.cli.score", "score recorded forecasts whose truth the store now holds"),
    "ledger backup": (
        "kronos_core.cli.ledger_backup",
        "copy the forecast ledger consistently while it is written",
    ),
    "ledger restore": (
        "kronos_core.cli.ledger_restore", "bring a ledger backup back as a new ledger folder",
    ),
    "timestamps-holdout": (
        "kronos_core.cli.timestamps_holdout", "hold-out check of future timestamps on real series",
    ),
}

# old spellings that still work (not listed in --help)
ALIASES: dict[str, str] = {"bench": "bench engine", "bench-store": "bench store"}


def plugin_commands() -> dict[str, tuple[str, str]]:
    """Commands other installed packages register under ``kronos.commands``. A package whose
    table cannot be loaded (a missing extra) is skipped with a debug note."""
    found: dict[str, tuple[str, str]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            table = ep.load()
        except ImportError as exc:  # pragma: no cover - a broken or partial install
            logging.getLogger(__name__).debug("kronos.commands %s: %s", ep.name, exc)
            continue
        found.update({str(k): (str(v[0]), str(v[1])) for k, v in dict(table).items()})
    return found


def all_commands() -> dict[str, tuple[str, str]]:
    """The core's commands, then the registered ones (a core name is never replaced)."""
    out = dict(COMMANDS)
    for name, spec in plugin_commands().items():
        out.setdefault(name, spec)
    return out


def build_parser(commands: dict[str, tuple[str, str]] | None = None) -> argparse.ArgumentParser:
    commands = all_commands() if commands is None else commands
    parser = argparse.ArgumentParser(
        prog="kronos", description="Kronos portfolio forecasting",
        epilog="`kronos COMMAND --help` describes a command's flags. `kronos bench` alone is "
               "`kronos bench engine`.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in commands.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def resolve(argv: list[str], commands: dict[str, tuple[str, str]]) -> tuple[int, int, str] | None:
    """(index of the command's first word, words it took, its name) in ``argv``, or None.
    Two-word names win (``bench store``); aliases map old spellings."""
    for i, word in enumerate(argv):
        if word.startswith("-"):
            continue  # a leading option such as -v
        pair = f"{word} {argv[i + 1]}" if i + 1 < len(argv) else None
        if pair in commands:
            return i, 2, pair
        if word in commands:
            return i, 1, word
        if word in ALIASES and ALIASES[word] in commands:
            return i, 1, ALIASES[word]
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = all_commands()
    top = build_parser(commands)
    found = resolve(argv, commands)
    if found is None:
        top.parse_args(argv)  # handles --help and unknown commands
        top.print_help()
        return 2
    idx, words, name = found
    top_args, _ = top.parse_known_args(argv[:idx])
    logging.basicConfig(
        level=logging.DEBUG if top_args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module_path, help_text = commands[name]
    from kronos_core.cli.requirements import missing_message, module_missing_message

    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        print(module_missing_message(name, exc), file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"kronos {name}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(argv[idx + words:])
    requires = getattr(module, "requires", None)  # optional packages, checked before any work
    why = missing_message(name, list(requires(args))) if requires is not None else None
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
