"""``kronos bench store``: time window reads from the Arrow store against pandas.read_csv (a
generated store), or a real store's window reads (``--store DIR``), or a day's append to ~1,000
stored daily symbols against the bare Parquet write of its rows (``--append-day``)."""

from __future__ import annotations

import argparse

from kronos_core.data.bench import bench_real_store, run_bench

GOAL_MS = 50.0
GOAL_RATIO = 50.0
APPEND_GOAL_RATIO = 3.0  # a day's append: at most this many times the bare Parquet write


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
    parser.add_argument(
        "--store", metavar="DIR",
        help="benchmark this real store's window reads instead (read only; --symbols and "
        "--candles do not apply)",
    )
    parser.add_argument(
        "--frequency", help="with --store: the frequency to read (default: the one with the "
        "most symbols)",
    )
    parser.add_argument(
        "--append-day", action="store_true",
        help="time a day's append instead: --symbols daily symbols with years of history "
        "(synthetic, or --corpus's symbols topped up with synthetic ones), one new row each in "
        "one CSV, "
        "imported as kronos import does it, against writing the same rows to Parquet; exit 1 "
        f"when it takes more than {APPEND_GOAL_RATIO:g}x",
    )
    parser.add_argument(
        "--corpus", metavar="PARQUET",
        help="with --append-day: a long-form daily candles file to build the store from, such "
        "as the training corpus's candles-ashare-daily.parquet (default: synthetic series; the "
        "package reads no file it is not given)",
    )


def run_real(args: argparse.Namespace) -> int:
    try:
        r = bench_real_store(args.store, args.frequency, args.lookback, args.repeats)
    except (ValueError, OSError) as exc:
        print(f"kronos bench store: {exc}")
        return 2
    print(f"store {r.root}: version {r.version}, {r.n_symbols} symbols at {r.frequency}, "
          f"windows of {r.lookback} candles ({r.errors} symbol errors)")
    for label, seconds in (
        ("cold: fresh reader", r.cold_s),
        ("cold: best of 5 more fresh readers", r.cold_best_s),
        ("cold: fresh reader, no snapshot", r.cold_files_s),
        ("warm: files cached (median)", r.warm_s),
        ("warm: files cached (best)", r.warm_best_s),
    ):
        print(f"  {label:<38}: {seconds * 1e3:9.1f} ms")
    print(f"  symbols opened from the snapshot      : {r.snapshot_opens} of {r.n_symbols}")
    return 0 if r.errors == 0 else 1


def run_append(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kronos_core.data.bench_append import run_append_bench

    corpus = Path(args.corpus) if args.corpus and args.corpus != "none" else None
    if corpus is not None and not corpus.is_file():
        print(f"kronos bench store: --corpus {corpus}: no such file")
        return 2
    r = run_append_bench(args.symbols, args.workdir, corpus)
    print(f"append a day, {r.days} times: {r.symbols} symbols, {r.history_rows:,} stored candles "
          f"before ({r.source}), {r.rows_after:,} after, store version {r.version}; medians")
    print(f"  kronos import of the day's CSV           : {r.append_s * 1e3:9.1f} ms")
    print(f"  the same rows to Parquet, file per symbol: {r.parquet_files_s * 1e3:9.1f} ms")
    print(f"  the same rows to Parquet, one file       : {r.parquet_one_s * 1e3:9.1f} ms")
    ok = r.ratio <= APPEND_GOAL_RATIO
    print(f"ratio {r.ratio:.2f}x the Parquet files (goal <= {APPEND_GOAL_RATIO:g}x): "
          f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def run(args: argparse.Namespace) -> int:
    if args.append_day:
        return run_append(args)
    if args.store:
        return run_real(args)
    r = run_bench(
        args.symbols, args.lookback, args.candles, args.repeats, args.workdir, progress=True
    )

    def line(label: str, seconds: float, ratio: float | None = None) -> None:
        tail = f"   {ratio:7.1f}x faster than CSV" if ratio is not None else ""
        print(f"  {label:<38}: {seconds * 1e3:9.1f} ms{tail}")

    print(f"windows: {r.n_symbols} symbols x {r.lookback} candles")
    line("pandas.read_csv per symbol", r.csv_s)
    line("store cold: fresh KlineStore", r.store_cold_s, r.ratio_cold)
    line("store cold: best of 5 more fresh", r.store_cold_best_s, r.csv_s / r.store_cold_best_s)
    line("store cold: new process (median of 3)", r.store_cold_process_s, r.ratio_cold_process)
    line("store cold: fresh, no snapshot", r.store_cold_files_s, r.ratio_cold_files)
    line("store warm: files cached (median)", r.store_warm_s, r.ratio_warm)
    line("store warm: files cached (best)", r.store_warm_best_s)
    print(f"  symbols opened from the snapshot      : {r.snapshot_opens} of {r.n_symbols}")
    print(f"  same windows every way                : {r.identical}")
    for name, seconds in (
        ("cold", r.store_cold_s),
        ("cold, new process", r.store_cold_process_s),
        ("warm", r.store_warm_s),
    ):
        ok = seconds * 1e3 <= GOAL_MS and r.csv_s / seconds >= GOAL_RATIO
        print(
            f"goal (<= {GOAL_MS:.0f} ms and >= {GOAL_RATIO:.0f}x), {name}: "
            f"{'met' if ok else 'NOT met'}"
        )
    return 0 if r.identical else 1
