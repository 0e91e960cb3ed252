"""Daily-append benchmark (``kronos bench store --append-day``): a store of ~1,000 daily
symbols with years of history takes one vendor day file (one row per symbol, one CSV with a
``symbol`` column), as ``kronos import DAY.csv --symbol-column symbol`` does it, against the
bare write of the same rows to Parquet.

The store holds one file per symbol, so its append writes one file per symbol; the baseline
is the same shape without the store: each symbol's new row written to its own Parquet file
(``pyarrow.parquet.write_table``, no validation, no merge, no fsync). One Parquet file of all
the rows is timed too, for reference. The history comes from a long-form daily file the caller
names (``--corpus``, e.g. the corpus's ``candles-ashare-daily.parquet``: its last ``DAYS`` dates
are the days appended, one import each, the rows before them the stored history), topped up with
synthetic series to ``symbols``, or is all synthetic (ten years of weekdays) without one.
On a shared machine file creation time swings by several times from one second to the next:
each day's Parquet write is timed just before its import, and the figures are the medians.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kronos_core.base.candles import FEATURES

DAYS = 3  # days appended, one import each (the median is reported)


@dataclass
class AppendResult:
    symbols: int  # symbols stored (and rows appended: one each)
    history_rows: int  # candles stored before the append
    source: str  # where the history came from
    append_s: float  # the import of a day file (validate, merge, publish), median of DAYS
    parquet_files_s: float  # the same rows, one Parquet file per symbol (median)
    parquet_one_s: float  # the same rows, one Parquet file (median)
    rows_after: int  # candles stored after the append
    version: int  # the store version the last append published
    days: int = 1  # days appended, one import each

    @property
    def ratio(self) -> float:
        return self.append_s / self.parquet_files_s


def _synthetic(symbols: list[str], days: pd.DatetimeIndex, seed: int = 0) -> pd.DataFrame:
    """Random-walk daily candles of ``symbols`` over ``days`` (long form, with ``symbol``)."""
    rng = np.random.default_rng(seed)
    parts = []
    for s in symbols:
        close = 10 * np.exp(np.cumsum(rng.normal(0, 0.02, len(days))))
        spread = close * 0.01
        parts.append(pd.DataFrame({
            "symbol": s, "timestamps": days, "open": close, "high": close + spread,
            "low": close - spread, "close": close, "volume": 1e6, "amount": 1e6 * close,
        }))
    return pd.concat(parts, ignore_index=True)


def load_rows(n_symbols: int, corpus: Path | None,
              n_days: int = DAYS) -> tuple[pd.DataFrame, list[pd.DataFrame], str]:
    """``(history, days, source)``: long-form candles (``symbol``, ``timestamps``, FEATURES)
    of ``n_symbols`` symbols, and for each of the ``n_days`` dates after the history one row
    per symbol (a suspended symbol gets its last close, flat)."""
    if corpus is not None and corpus.is_file():
        rows = pd.read_parquet(corpus)
        rows = rows[rows["symbol"].isin(sorted(rows["symbol"].unique())[:n_symbols])]
        rows["amount"] = rows["amount"].fillna(rows["volume"] * rows["close"])
        dates = sorted(rows["timestamps"].unique())[-n_days:]
        history = rows[rows["timestamps"] < dates[0]]
        last = history.groupby("symbol", sort=True).tail(1).set_index("symbol")
        days = []
        for date in dates:
            traded = rows[rows["timestamps"] == date].set_index("symbol")
            last.loc[traded.index, list(FEATURES)] = traded[list(FEATURES)]
            days.append(last.assign(timestamps=date).reset_index())
        source = f"{corpus.name} ({history['symbol'].nunique()} symbols)"
        missing = n_symbols - days[0]["symbol"].nunique()
        if missing > 0:
            grid = pd.bdate_range(end=dates[-1], periods=2500)
            extra = _synthetic([f"SYN{i:04d}.SH" for i in range(missing)], grid)
            history = pd.concat([history, extra[extra["timestamps"] < dates[0]]],
                                ignore_index=True)
            days = [pd.concat([d, extra[extra["timestamps"] == date]], ignore_index=True)
                    for d, date in zip(days, dates)]
            source += f" + {missing} synthetic"
        return history, days, source
    grid = pd.bdate_range("2015-01-05", periods=2500 + n_days)
    rows = _synthetic([f"{600000 + i}.SH" for i in range(n_symbols)], grid)
    history = rows[rows["timestamps"] < grid[-n_days]]
    return history, [rows[rows["timestamps"] == d] for d in grid[-n_days:]], "synthetic"


def build_store(root: Path, history: pd.DataFrame) -> None:
    """The stored history, written as one transaction (no validation: the rows are clean),
    compacted as an import leaves it."""
    from kronos_core.data.store import KlineStore

    store = KlineStore(root)
    cols = ["timestamps", *FEATURES]
    with store.transaction(fsync=False) as tx:
        for symbol, part in history.groupby("symbol", sort=True):
            tx.write(str(symbol), part[cols].reset_index(drop=True), frequency="1d",
                     extra_metadata={"exchange": "XSHG"})
    store.compact()


def time_parquet(day: pd.DataFrame, folder: Path) -> tuple[float, float]:
    """Seconds to write ``day``'s rows as one Parquet file per symbol, and as one file."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table = pa.Table.from_pandas(day, preserve_index=False)
    symbols = table.column("symbol").to_pylist()
    for i, s in enumerate(symbols):
        pq.write_table(table.slice(i, 1), folder / f"{s}.parquet")
    files = time.perf_counter() - t0
    t0 = time.perf_counter()
    pq.write_table(pa.Table.from_pandas(day, preserve_index=False), folder / "day.parquet")
    return files, time.perf_counter() - t0


def run_append_bench(n_symbols: int = 1000, workdir: str | None = None,
                     corpus: Path | None = None) -> AppendResult:
    """Build the store, write the day's rows to Parquet (the baseline), then time the day's
    import; the temporary folder is removed afterwards."""
    from kronos_core.data.importer import import_files
    from kronos_core.data.store import KlineStore

    history, days, source = load_rows(n_symbols, corpus)
    tmp = Path(tempfile.mkdtemp(prefix="kronos-append-", dir=workdir))
    try:
        root = tmp / "store"
        build_store(root, history)
        appends, files, ones = [], [], []
        for k, day in enumerate(days):
            day_csv = tmp / f"day{k}.csv"
            out = day.assign(timestamps=pd.to_datetime(day["timestamps"]).dt.strftime("%Y-%m-%d"))
            out.to_csv(day_csv, index=False)
            parquet_files, parquet_one = time_parquet(day, tmp / f"parquet{k}")
            files.append(parquet_files)
            ones.append(parquet_one)
            t0 = time.perf_counter()
            outcomes = import_files([day_csv], root, symbol_column="symbol", progress=False)
            appends.append(time.perf_counter() - t0)
            failed = [o.error for o in outcomes if not o.ok]
            if failed:
                raise RuntimeError(f"the day's import failed: {failed[:3]}")
        store = KlineStore(root)
        rows_after = sum(int(store.metadata(s)["rows"]) for s in store.symbols())
        return AppendResult(
            symbols=int(days[0]["symbol"].nunique()), history_rows=len(history), source=source,
            append_s=float(np.median(appends)), parquet_files_s=float(np.median(files)),
            parquet_one_s=float(np.median(ones)), rows_after=rows_after, version=store.version,
            days=len(days),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
