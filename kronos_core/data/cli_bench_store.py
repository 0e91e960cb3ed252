"""``kronos bench-store``: time window reads from the Arrow store against pandas.read_csv."""

from __future__ import annotations

import argparse

from kronos_core.data.bench import run_bench

GOAL_MS = 50.0
GOAL_RATIO = 50.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--symbols", type=int, default=1000, help="symbols (default 1000)")
    parser.add_argument(
        "--lookback", type=int, default=512, help="candles per window (default 512)"
    )
    parser.add_argument(
        "--candles", type=int, default=1000, help="candles per stored symbol (default 1000)"
    )
    parser.add_argument("--repeats", type=int, default=11, help="repeated store reads (median)")
    parser.add_argument(
        "--workdir", help="where to put the temporary store and CSVs (default: system temp)"
    )


def run(args: argparse.Namespace) -> int:
    r = run_bench(
        args.symbols, args.lookback, args.candles, args.repeats, args.workdir, progress=True
    )
    print(f"windows: {r.n_symbols} symbols x {r.lookback} candles")
    print(f"  pandas.read_csv per symbol : {r.csv_s * 1e3:9.1f} ms")
    print(
        f"  store, first read (cold)   : {r.store_cold_s * 1e3:9.1f} ms   {r.ratio_cold:7.1f}x faster than CSV"
    )
    print(
        f"  store, cached (warm median): {r.store_warm_s * 1e3:9.1f} ms   {r.ratio_warm:7.1f}x faster than CSV"
    )
    print(f"  store, cached (warm best)  : {r.store_warm_best_s * 1e3:9.1f} ms")
    print(f"  same windows both ways     : {r.identical}")
    ok = r.store_warm_s * 1e3 <= GOAL_MS and r.ratio_warm >= GOAL_RATIO
    print(
        f"goal (<= {GOAL_MS:.0f} ms and >= {GOAL_RATIO:.0f}x, warm): {'met' if ok else 'NOT met'}"
    )
    return 0 if r.identical else 1
