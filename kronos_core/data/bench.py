"""Store read benchmark: windows of many symbols from the Arrow store against per-symbol CSVs
(``run_bench``, a generated store), or the window reads of a real store (``bench_real_store``)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from tqdm.auto import tqdm

from kronos_core.base.candles import FEATURES
from kronos_core.data.sample_store import build_sample_store
from kronos_core.data.store import KlineStore, WindowBatch


@dataclass
class BenchResult:
    n_symbols: int
    lookback: int
    store_cold_s: float  # first read in a fresh KlineStore (one snapshot mapping + stats)
    store_warm_s: float  # median of repeated reads (opened files cached)
    store_warm_best_s: float  # fastest of the repeated reads
    csv_s: float  # pandas.read_csv of every file, then the same tail window
    identical: bool  # every store path returned the CSV path's windows
    store_cold_files_s: float = float("nan")  # first read without the snapshot (maps every file)
    store_cold_process_s: float = float("nan")  # first read in a new process (median of 3)
    snapshot_opens: int = 0  # symbols the cold read took from the snapshot
    store_cold_best_s: float = float("nan")  # fastest first read of 5 more fresh KlineStores

    @property
    def ratio_warm(self) -> float:
        return self.csv_s / self.store_warm_s

    @property
    def ratio_cold(self) -> float:
        return self.csv_s / self.store_cold_s

    @property
    def ratio_cold_files(self) -> float:
        return self.csv_s / self.store_cold_files_s

    @property
    def ratio_cold_process(self) -> float:
        return self.csv_s / self.store_cold_process_s


_COLD_PROCESS = """
import json, sys, time
from kronos_core.data.store import KlineStore, WindowBatch
store = KlineStore(sys.argv[1], frequency="5min")
symbols = store.symbols()
t0 = time.perf_counter()
batch = store.read_windows(symbols, int(sys.argv[2]))
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "n": len(batch), "snapshot": store.opened["snapshot"]}))
"""


def _cold_in_new_process(root: Path, lookback: int, n_symbols: int, runs: int = 3) -> float:
    """Median over ``runs`` new interpreters of the first ``read_windows`` of every
    symbol (nothing cached in Python; the OS page cache is still warm)."""
    times = []
    for _ in range(runs):
        try:
            out = subprocess.run(
                [sys.executable, "-c", _COLD_PROCESS, str(root), str(lookback)],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return float("nan")
        if got["n"] != n_symbols or got["snapshot"] != n_symbols:
            return float("nan")
        times.append(float(got["seconds"]))
    return statistics.median(times)


def _same_batch(a, b) -> bool:
    return a.symbols == b.symbols and all(
        np.array_equal(x.values, y.values)
        and np.array_equal(x.timestamps, y.timestamps)
        and x.metadata == y.metadata
        and x.last_stored == y.last_stored
        for x, y in zip(a.windows, b.windows)
    )


def _write_csvs(store: KlineStore, symbols: list[str], out: Path, progress: bool) -> list[Path]:
    paths = []
    opts = pacsv.WriteOptions(include_header=True)
    for s in tqdm(symbols, desc="write csv", unit="file", disable=not progress):
        df = store.read(s)
        columns = {"timestamps": pa.array(df["timestamps"].to_numpy().astype("datetime64[s]"))}
        columns.update({c: pa.array(df[c].to_numpy()) for c in FEATURES})
        p = out / f"{s}.csv"
        pacsv.write_csv(pa.table(columns), p, opts)  # stamps as "2024-08-30 15:00:00"
        paths.append(p)
    return paths


def run_bench(
    n_symbols: int = 1000,
    lookback: int = 512,
    n_candles: int = 1000,
    repeats: int = 11,
    workdir: str | None = None,
    progress: bool = False,
) -> BenchResult:
    """Build a temporary store (compacted, as ``build_sample_store`` leaves it) and
    CSVs of ``n_symbols`` and time reading the last ``lookback`` candles of every
    symbol: store cold (fresh ``KlineStore``; with and without the snapshot; in a
    new process), store warm, and CSV, in one run."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="kronos-bench-") as tmp:
        root = Path(tmp) / "store"
        build_sample_store(
            root, n_symbols=n_symbols, n_candles=n_candles, include_real=False, seed=1
        )
        store = KlineStore(root, frequency="5min")
        symbols = store.symbols()
        csv_dir = Path(tmp) / "csv"
        csv_dir.mkdir()
        paths = _write_csvs(store, symbols, csv_dir, progress)

        fresh = KlineStore(root, frequency="5min")
        t0 = time.perf_counter()
        batch = fresh.read_windows(symbols, lookback)
        cold = time.perf_counter() - t0
        snapshot_opens = fresh.opened["snapshot"]
        cold_times = []
        for _ in range(5):
            again = KlineStore(root, frequency="5min")
            t0 = time.perf_counter()
            again.read_windows(symbols, lookback)
            cold_times.append(time.perf_counter() - t0)
        del again
        per_file = KlineStore(root, frequency="5min", snapshot=False)
        t0 = time.perf_counter()
        batch_files = per_file.read_windows(symbols, lookback)
        cold_files = time.perf_counter() - t0
        del per_file
        cold_process = _cold_in_new_process(root, lookback, len(symbols))
        cold_batch = batch
        warm_times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            batch = fresh.read_windows(symbols, lookback)
            warm_times.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        windows, stamps = [], []
        for p in paths:
            df = pd.read_csv(p, parse_dates=["timestamps"])
            tail = df.iloc[-lookback:]
            windows.append(tail[list(FEATURES)].to_numpy(dtype=np.float32))
            stamps.append(tail["timestamps"].to_numpy(dtype="datetime64[ns]"))
        csv_s = time.perf_counter() - t0

        identical = len(batch.errors) == 0 and len(batch) == len(paths)
        identical &= _same_batch(batch, cold_batch) and _same_batch(batch, batch_files)
        for w, v, ts in zip(batch.windows, windows, stamps):
            identical &= np.array_equal(w.values, v) and np.array_equal(w.timestamps, ts)
        return BenchResult(
            n_symbols=len(symbols),
            lookback=lookback,
            store_cold_s=cold,
            store_warm_s=statistics.median(warm_times),
            store_warm_best_s=min(warm_times),
            csv_s=csv_s,
            identical=bool(identical),
            store_cold_files_s=cold_files,
            store_cold_process_s=cold_process,
            snapshot_opens=snapshot_opens,
            store_cold_best_s=min(cold_times),
        )


@dataclass
class RealStoreResult:
    """Window reads of every symbol of one frequency of a real store, in seconds."""

    root: str
    frequency: str
    version: int  # the store version read (0: unversioned)
    n_symbols: int
    lookback: int
    errors: int  # symbols the read reported as errors
    cold_s: float  # first read in a fresh reader (snapshot when present)
    cold_best_s: float  # fastest first read of 5 more fresh readers
    cold_files_s: float  # first read of a fresh reader that maps every file (no snapshot)
    warm_s: float  # median of repeated reads of one reader (opened files cached)
    warm_best_s: float  # fastest repeated read
    snapshot_opens: int  # symbols the cold read took from the snapshot


def bench_real_store(root: str | Path, frequency: str | None = None, lookback: int = 512,
                     repeats: int = 11) -> RealStoreResult:
    """Time ``read_windows`` of every symbol of ``frequency`` (default: the frequency holding
    the most symbols) of the store at ``root``: cold, cold without the snapshot, warm. Reads
    only."""
    probe = KlineStore(root)
    freqs = probe.frequencies()
    if not freqs:
        raise ValueError(f"{root}: no symbols (is it a store folder?)")
    if frequency is None:
        frequency = max(freqs, key=lambda f: len(probe.symbols(f)))
    symbols = probe.symbols(frequency)

    def cold(snapshot: bool = True) -> tuple[float, KlineStore, WindowBatch]:
        reader = KlineStore(root, frequency=frequency, snapshot=snapshot)
        t0 = time.perf_counter()
        batch = reader.read_windows(symbols, lookback)
        return time.perf_counter() - t0, reader, batch

    cold_s, reader, batch = cold()
    snapshot_opens = reader.opened["snapshot"]
    cold_best = min(cold()[0] for _ in range(5))
    cold_files = cold(snapshot=False)[0]
    warm = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        reader.read_windows(symbols, lookback)
        warm.append(time.perf_counter() - t0)
    return RealStoreResult(
        root=str(root), frequency=frequency, version=probe.version, n_symbols=len(symbols),
        lookback=lookback, errors=len(batch.errors), cold_s=cold_s, cold_best_s=cold_best,
        cold_files_s=cold_files, warm_s=statistics.median(warm), warm_best_s=min(warm),
        snapshot_opens=snapshot_opens,
    )
