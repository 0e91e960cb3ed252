"""``kronos sample-store --symbols N --out DIR``: generate a synthetic sample store."""

from __future__ import annotations

import argparse
import time

from kronos_core.data.sample_store import (
    DEFAULT_END,
    DEFAULT_N_CANDLES,
    DEFAULT_SEED,
    build_sample_store,
)
from kronos_core.data.store import KlineStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--symbols", type=int, default=2000, help="synthetic symbols (default 2000)"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="store directory to write")
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="random seed (same seed, same store)"
    )
    parser.add_argument(
        "--candles", type=int, default=DEFAULT_N_CANDLES, help="5-minute candles per symbol"
    )
    parser.add_argument("--end", default=DEFAULT_END, help="last trading day (default %(default)s)")
    parser.add_argument("--no-real", action="store_true", help="leave out the bundled real series")
    parser.add_argument("--fsync", action="store_true", help="fsync every file (slower, durable)")


def run(args: argparse.Namespace) -> int:
    if args.symbols < 0 or args.candles < 2:
        print("kronos sample-store: --symbols must be >= 0 and --candles >= 2")
        return 2
    t0 = time.perf_counter()
    out = build_sample_store(
        args.out,
        n_symbols=args.symbols,
        seed=args.seed,
        n_candles=args.candles,
        include_real=not args.no_real,
        end=args.end,
        fsync=args.fsync,
        progress=True,
    )
    seconds = time.perf_counter() - t0
    store = KlineStore(out)
    n = len(store.symbols())
    print(
        f"wrote {n} symbols ({args.symbols} synthetic) to {out} in {seconds:.2f} s; frequencies "
        f"{store.frequencies()}"
    )
    return 0
