"""``kronos score``: score the ledger's forecasts whose truth the store now holds, and print
the accuracy per model and horizon step.

Example::

    kronos import new_candles.csv --store data/store
    kronos score --store data/store              # ledger: data/store/_ledger
    kronos score --ledger /shared/ledger --since 2026-11-01 --json

Defaults: the store is ``KRONOS_STORE_DIR`` or the embedded sample store (as ``kronos
serve``); the ledger is ``KRONOS_LEDGER_DIR`` or ``<store>/_ledger``. Each step is scored
once (see ``docs/ledger.md``); running it again scores only what became scorable since.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", type=Path, metavar="DIR",
        help="K-line store holding the truths (default: KRONOS_STORE_DIR, else the sample store)",
    )
    parser.add_argument("--ledger", type=Path, metavar="DIR",
                        help="forecast ledger (default: KRONOS_LEDGER_DIR, else <store>/_ledger)")
    parser.add_argument(
        "--since", metavar="T", help="only forecasts requested at or after T (ISO time, UTC)"
    )
    parser.add_argument(
        "--frequency", help="store frequency folder for forecasts that recorded none"
    )
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="rolling window: the last N scored steps (default 500)")
    parser.add_argument(
        "--require-next-bar", action="store_true",
        help="count a candle as a truth only once a later one is stored (stores fed with forming "
             "bars)",
    )
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")


def resolve_dirs(store: Path | None, ledger: Path | None) -> tuple[Path, Path]:
    """(store, ledger) folders: the flags, else the environment, else the defaults."""
    from kronos_core.ledger import default_ledger_dir

    if store is None:
        env = os.environ.get("KRONOS_STORE_DIR")
        if env:
            store = Path(env)
        else:
            from kronos_core.data.sample_store import default_sample_store

            store = default_sample_store()
    if ledger is None:
        env = os.environ.get("KRONOS_LEDGER_DIR")
        ledger = Path(env) if env and env.lower() != "off" else default_ledger_dir(store)
    return store, ledger


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.4g}"


def table_lines(rows: list[dict]) -> list[str]:
    """The per model and horizon step table ``kronos score`` prints: all-time figures, and
    the rolling coverage of the 80% band (else the widest)."""
    levels = sorted({lv for r in rows for lv in r["all_time"]["coverage"]}, key=float)
    watched = ["0.8"] if "0.8" in levels else levels[-1:]  # the alert's level when present
    head = ["model", "step", "scored", "crps", "mae", "direction"] + [f"cov {lv}" for lv in levels]
    head += ["rolling cov " + lv for lv in watched]
    out = [head]
    for r in rows:
        a = r["all_time"]
        name = (r["model_name"] or "") + " " + r["model_sha256"][:12]
        line = [
            name.strip(), str(r["horizon_step"]), str(a["scored"]), _fmt(a["crps"]), _fmt(a["mae"]),
            _fmt(a["direction_accuracy"], True),
        ] + [_fmt(a["coverage"].get(lv), True) for lv in levels]
        line += [_fmt(r["rolling"]["coverage"].get(lv), True) for lv in watched]
        out.append(line)
    widths = [max(len(row[i]) for row in out) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in out
    ]


def run(args: argparse.Namespace) -> int:
    from kronos_core.data.store_reader import KlineReader
    from kronos_core.ledger import DEFAULT_WINDOW, Ledger, LedgerError, by_model_and_step, score
    from kronos_core.ledger.accuracy import select

    store_dir, ledger_dir = resolve_dirs(args.store, args.ledger)
    if not Path(store_dir).is_dir():
        print(f"kronos score: no store at {store_dir}", file=sys.stderr)
        return 2
    if not Path(ledger_dir).is_dir():
        print(f"kronos score: no ledger at {ledger_dir} (nothing recorded yet?)", file=sys.stderr)
        return 2
    ledger = Ledger(ledger_dir)
    reader = KlineReader(store_dir, args.frequency)
    try:
        result = score(ledger, reader, since=args.since, require_next_bar=args.require_next_bar)
    except LedgerError as exc:
        print(f"kronos score: {exc}", file=sys.stderr)
        return 1
    window: int | timedelta = args.window or DEFAULT_WINDOW
    # scores of forecasts requested since T were written since T: read those, keep the forecasts'
    scores = select(ledger.read_scores(since=args.since), since=args.since)
    rows = by_model_and_step(scores, window)
    for path, why in result.skipped_files:
        print(f"kronos score: skipped unreadable {path}: {why}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "scored_now": result.scores.num_rows, "waiting": result.waiting,
                    "store": str(store_dir), "ledger": str(ledger_dir), "rows": rows,
                },
                indent=1,
            )
        )
        return 0
    print(
        f"scored {result.scores.num_rows} new forecast steps ({result.waiting} waiting for their "
        f"truth); ledger {ledger_dir}, store {store_dir}"
    )
    if rows:
        print("\n".join(table_lines(rows)))
        print(f"(all time; rolling: the last {window} scored steps of each row)")
    else:
        print("no scored forecasts yet")
    return 0
