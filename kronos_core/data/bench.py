"""Store read benchmark: windows of many symbols from the Arrow store against per-symbol CSVs."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from tqdm.auto import tqdm

from kronos_core.candles import FEATURES
from kronos_core.data.sample_store import build_sample_store
from kronos_core.data.store import KlineStore


@dataclass
class BenchResult:
    n_symbols: int
    lookback: int
    store_cold_s: float  # first read in a fresh KlineStore (opens and maps every file)
    store_warm_s: float  # median of repeated reads (opened files cached)
    store_warm_best_s: float  # fastest of the repeated reads
    csv_s: float  # pandas.read_csv of every file, then the same tail window
    identical: bool  # both paths returned the same windows

    @property
    def ratio_warm(self) -> float:
        return self.csv_s / self.store_warm_s

    @property
    def ratio_cold(self) -> float:
        return self.csv_s / self.store_cold_s


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
    """Build a temporary store and CSVs of ``n_symbols`` and time reading the last
    ``lookback`` candles of every symbol both ways, in one run."""
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
        for i in range(len(batch)):
            v, ts = batch.series(i)
            identical &= np.array_equal(v, windows[i]) and np.array_equal(ts.to_numpy(), stamps[i])
        return BenchResult(
            n_symbols=len(symbols),
            lookback=lookback,
            store_cold_s=cold,
            store_warm_s=statistics.median(warm_times),
            store_warm_best_s=min(warm_times),
            csv_s=csv_s,
            identical=bool(identical),
        )
