"""Candle series for evaluation and backtests, from CSV/Parquet files or an Arrow store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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

    def __len__(self) -> int:
        return len(self.values)


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
    """Series from CSV/Parquet files (one symbol each, named by the file stem) and store
    folders (``symbols`` picks from a store; all its symbols without it).

    Files go through the reader every command uses (``kronos_core.data.reader``): any-case
    column names, the time column auto-detected or ``read_options.time_column``, every problem
    reported by row, repairs (``--sort``, ``--drop-nan``, ...) only when asked."""
    options = read_options or ReadOptions()
    out: list[Series] = []
    for src in sources:
        path = Path(src)
        if path.is_dir():
            out.extend(_from_store(path, symbols))
        elif path.is_file():
            try:
                frame, _tz, _report = read_candles(path, options)
            except CandleError as exc:
                raise DataError(str(exc)) from exc
            out.append(_from_frame(frame, path.stem, str(path), "timestamps"))
        else:
            raise DataError(f"{path}: no such file or store folder")
    if not out:
        raise DataError("no series: give --data with CSV files or a store folder")
    return out


def _from_store(root: Path, symbols: Sequence[str] | None) -> list[Series]:
    from kronos_core.data.store import TIME_COLUMN, KlineStore, StoreError

    store = KlineStore(root)
    try:
        version = store.manifest()  # every symbol from this one store version
    except StoreError as exc:
        raise DataError(f"store {root}: {exc}") from exc
    names = list(symbols) if symbols else store.symbols(None, version)
    out = []
    for sym in names:
        try:
            df = store.read(sym, manifest=version)
        except (StoreError, KeyError) as exc:
            raise DataError(f"store {root}: {exc}") from exc
        out.append(_from_frame(df, sym, f"{root}:{sym}", TIME_COLUMN))
    return out
