"""Candle series for evaluation and backtests, from CSV/Parquet files or an Arrow store."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.base.candles import CandleError, candle_array
from kronos_core.data.reader import ReadOptions, read_candles


@dataclass
class Series:
    """One symbol's whole history."""

    name: str  # symbol or file stem
    values: np.ndarray  # (T, 6) float32, FEATURES order
    timestamps: pd.DatetimeIndex  # (T,) increasing
    source: str  # file or store it came from
    # what its future timestamps follow (kronos_core.data.timestamps.future_options): exchange,
    # sessions (24/7 inferred by the store), timezone, session_timezone
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.values)


BAR_SIZE = re.compile(r"\d+(s|min|h|d|w|mo)")  # the names infer_frequency gives folders


class DataError(ValueError):
    """Unusable input data; the message names the file or symbol and the fix."""


def _from_frame(df: pd.DataFrame, name: str, source: str, column: str) -> Series:
    if column not in df.columns:
        raise DataError(
            f"{source}: no {column!r} column (columns: {list(df.columns)}); pass --time-column"
        )
    stamps = pd.DatetimeIndex(pd.to_datetime(df[column]))
    if not stamps.is_monotonic_increasing or stamps.has_duplicates:
        raise DataError(
            f"{source}: timestamps must be strictly increasing (--sort, --drop-duplicates)"
        )
    try:
        values = candle_array(df)
    except CandleError as exc:
        raise DataError(f"{source}: {exc}") from exc
    if not np.isfinite(values).all():
        raise DataError(f"{source}: non-finite candle values (--drop-nan)")
    return Series(name, values, stamps, source)


def load_series(sources: Sequence[str | Path], symbols: Sequence[str] | None = None,
                read_options: ReadOptions | None = None) -> list[Series]:
    """Series from CSV/Parquet files (one symbol each, named by the file stem), folders of
    such files, and store folders (``symbols`` picks from a store; all its symbols without
    it); ``STORE/FREQ`` reads one frequency folder of a store. Each series' ``meta`` is its
    store metadata (a file's: its zone and the round-the-clock calendar inferred from it).

    Files go through the reader every command uses (``kronos_core.data.reader``): any-case
    column names, the time column auto-detected or ``read_options.time_column``, every problem
    reported by row, repairs (``--sort``, ``--drop-nan``, ...) only when asked."""
    options = read_options or ReadOptions()
    out: list[Series] = []
    paths: list[Path] = []
    for src in sources:
        path = Path(src)
        paths.extend(candle_files(path) if path.is_dir() and candle_files(path) else [path])
    for path in paths:
        if path.is_dir():
            out.extend(_from_store(path, symbols))
        elif path.is_file():
            try:
                frame, _tz, _report = read_candles(path, options)
            except CandleError as exc:
                raise DataError(str(exc)) from exc
            series = _from_frame(frame, path.stem, str(path), "timestamps")
            series.meta = _file_meta(series.timestamps, _tz)
            out.append(series)
        else:
            raise DataError(f"{path}: no such file or store folder")
    if not out:
        raise DataError("no series: give --data with CSV files or a store folder")
    return out


def candle_files(folder: Path) -> list[Path]:
    """A folder of candle files (one series each), sorted by name, when it holds such files and
    no folders (a store holds folders); else []."""
    entries = [e for e in folder.iterdir() if not e.name.startswith(".")]
    if any(e.is_dir() for e in entries):
        return []
    from kronos_core.data.reader import CSV_SUFFIXES, PARQUET_SUFFIXES

    return sorted(e for e in entries if e.name.lower().endswith(CSV_SUFFIXES + PARQUET_SUFFIXES))


def store_and_frequency(path: Path) -> tuple[Path, str | None]:
    """``STORE`` -> (STORE, None); ``STORE/5min`` (a frequency folder of a store: named like a
    bar size, ``BAR_SIZE``, and holding no folders of its own but the store's internal ones,
    ``_v`` of its versions and dot-folders) -> (STORE, "5min")."""
    if BAR_SIZE.fullmatch(path.name) and not any(e.is_dir() for e in path.iterdir()
                                                 if not e.name.startswith((".", "_"))):
        return path.parent, path.name
    return path, None


def _from_store(path: Path, symbols: Sequence[str] | None) -> list[Series]:
    from kronos_core.data.store import TIME_COLUMN, KlineStore, StoreError

    root, frequency = store_and_frequency(path)
    store = KlineStore(root, frequency)
    try:
        version = store.manifest()  # every symbol from this one store version
    except StoreError as exc:
        raise DataError(f"store {root}: {exc}") from exc
    names = list(symbols) if symbols else store.symbols(frequency, version)
    if not names:
        where = f"frequency folder {frequency} of store {root}" if frequency else f"store {root}"
        raise DataError(f"{where}: no series (frequencies: {store.frequencies() or 'none'})")
    out = []
    for sym in names:
        try:
            df = store.read(sym, manifest=version)
            meta = dict(store.metadata(sym))
        except (StoreError, KeyError) as exc:
            raise DataError(f"store {root}: {exc}") from exc
        series = _from_frame(df, sym, f"{path}:{sym}", TIME_COLUMN)
        series.meta = meta
        out.append(series)
    return out


def _file_meta(stamps: pd.DatetimeIndex, timezone: str | None) -> dict:
    """A file's metadata as the store would record it on import: its zone and, from the whole
    file, the round-the-clock calendar it follows (``sessions``), if any."""
    from kronos_core.data.round_clock import infer_round_clock

    meta: dict = {"timezone": timezone} if timezone else {}
    inferred = infer_round_clock(stamps)
    if inferred:
        meta["sessions"] = inferred
    return meta
