"""Candle schema and the model's input rules, shared by the predictor, the store and the service.

A candle row is ``open, high, low, close, volume, amount`` (``FEATURES``), float32.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PRICE_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close")
VOLUME_COLUMN = "volume"
AMOUNT_COLUMN = "amount"
FEATURES: tuple[str, ...] = (*PRICE_COLUMNS, VOLUME_COLUMN, AMOUNT_COLUMN)
TIME_FEATURES: tuple[str, ...] = ("minute", "hour", "weekday", "day", "month")

NORM_EPS = 1e-5  # added to the standard deviation before dividing, as the reference does


class CandleError(ValueError):
    """Input candles that the model cannot use; the message says what is wrong."""


def fill_volume_amount(df: pd.DataFrame) -> pd.DataFrame:
    """Return a copy of ``df`` with ``volume`` and ``amount`` filled by the model's rules.

    No volume column: volume = amount = 0. Volume but no amount:
    amount = volume * mean(open, high, low, close). Raises ``CandleError`` when a
    price column is missing or any of the six values is NaN.
    """
    if not isinstance(df, pd.DataFrame):
        raise CandleError(f"expected a pandas DataFrame of candles, got {type(df).__name__}")
    missing = [c for c in PRICE_COLUMNS if c not in df.columns]
    if missing:
        raise CandleError(f"price columns {missing} not found; columns present: {list(df.columns)}")
    df = df.copy()
    if VOLUME_COLUMN not in df.columns:
        df[VOLUME_COLUMN] = 0.0
        df[AMOUNT_COLUMN] = 0.0
    if AMOUNT_COLUMN not in df.columns:
        df[AMOUNT_COLUMN] = df[VOLUME_COLUMN] * df[list(PRICE_COLUMNS)].mean(axis=1)
    values = df[list(FEATURES)]
    nan_mask = values.isnull().to_numpy()
    if nan_mask.any():
        rows, cols = np.nonzero(nan_mask)
        first = ", ".join(f"row {r} {FEATURES[c]}" for r, c in list(zip(rows, cols))[:5])
        raise CandleError(f"candles contain {int(nan_mask.sum())} NaN value(s) (first: {first})")
    return df


def candle_array(df: pd.DataFrame) -> np.ndarray:
    """(L, 6) float32 array of ``FEATURES`` after the volume/amount rules and NaN check."""
    return fill_volume_amount(df)[list(FEATURES)].to_numpy(dtype=np.float32)


def time_features(timestamps) -> np.ndarray:
    """(L, 5) float32 array [minute, hour, weekday (Mon=0), day, month] of the timestamps.

    Accepts a Series of datetimes, a DatetimeIndex, or anything ``pd.DatetimeIndex`` takes.
    """
    idx = pd.DatetimeIndex(timestamps.values if isinstance(timestamps, pd.Series) else timestamps)
    if idx.tz is not None:
        idx = idx.tz_localize(None)  # the wall-clock time of its zone, as pandas' fields read it
    if idx.hasnans:  # NaT: pandas' fields give NaN
        return np.stack(
            [idx.minute, idx.hour, idx.day_of_week, idx.day, idx.month], axis=-1
        ).astype(np.float32)
    return _calendar_fields(idx.values)


def _calendar_fields(stamps: np.ndarray) -> np.ndarray:
    """datetime64 (L,) of any unit, no NaT -> (L, 5) float32 [minute, hour, weekday (Mon=0), day,
    month]: pandas' fields by numpy's calendar arithmetic (casts to a coarser unit floor, so
    dates before 1970 work), about 20 times faster than five pandas field look-ups."""
    minutes = stamps.astype("datetime64[m]").astype(np.int64)  # minutes since 1970-01-01
    days = stamps.astype("datetime64[D]")
    months = stamps.astype("datetime64[M]")
    fields = np.empty((len(stamps), 5), dtype=np.float32)
    fields[:, 0] = minutes % 60
    fields[:, 1] = (minutes // 60) % 24
    fields[:, 2] = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday (3)
    fields[:, 3] = (days - months.astype("datetime64[D]")).astype(np.int64) + 1
    fields[:, 4] = months.astype(np.int64) % 12 + 1
    return fields


def normalize(x: np.ndarray, clip: float = 5.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-series z-score over the lookback, clipped, all in float32 like the reference.

    x: (L, 6) float32. Returns (x_norm (L, 6), mean (6,), std (6,)); de-normalize with
    ``x_norm * (std + NORM_EPS) + mean``.
    """
    x = np.asarray(x, dtype=np.float32)
    mean = np.mean(x, axis=0)
    std = np.std(x, axis=0)
    x_norm = np.clip((x - mean) / (std + NORM_EPS), -clip, clip)
    return x_norm.astype(np.float32), mean, std


def denormalize(x_norm: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Inverse of ``normalize`` (clipping aside); broadcasts over leading dims."""
    return x_norm * (std + NORM_EPS) + mean


def repair_candles(x: np.ndarray) -> np.ndarray:
    """Make candles self-consistent: volume, amount >= 0; high >= max(open, close); low <= min(open,
    close).

    x: (..., 6). Returns a repaired copy.
    """
    x = np.array(x, copy=True)
    o, h, lo, c = x[..., 0], x[..., 1], x[..., 2], x[..., 3]
    x[..., 1] = np.maximum(h, np.maximum(o, c))
    x[..., 2] = np.minimum(lo, np.minimum(o, c))
    x[..., 4:] = np.maximum(x[..., 4:], 0.0)
    return x
