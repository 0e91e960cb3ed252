"""Helpers of the ledger tests: a small daily store and forecast records over it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.base.candles import FEATURES
from kronos_core.data.store import KlineStore
from kronos_core.ledger import CalibrationStamp, ForecastRecord

FREQ = "1d"
SHA = "ab" * 32
START = pd.Timestamp("2026-01-01")
# unit normal quantiles
Z = {0.05: -1.645, 0.1: -1.2816, 0.25: -0.6745, 0.5: 0.0, 0.75: 0.6745, 0.9: 1.2816, 0.95: 1.645}


def candles(
    n: int, start: pd.Timestamp = START, seed: int = 0, base: float = 100.0
) -> pd.DataFrame:
    """``n`` daily candles (positive, candle-consistent) from ``start``."""
    rng = np.random.default_rng(seed)
    close = base * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.concatenate([[base], close[:-1]])
    high = np.maximum(open_, close) * 1.002
    low = np.minimum(open_, close) * 0.998
    ts = pd.date_range(start, periods=n, freq="D")
    return pd.DataFrame({"timestamps": ts, "open": open_, "high": high, "low": low, "close": close,
                         "volume": np.full(n, 1e3), "amount": close * 1e3})


def make_store(root, frames: dict[str, pd.DataFrame]) -> KlineStore:
    store = KlineStore(root, FREQ)
    for symbol, frame in frames.items():
        store.write(symbol, frame, frequency=FREQ)
    return store


def append(store: KlineStore, symbol: str, frame: pd.DataFrame) -> None:
    store.write(symbol, frame, frequency=FREQ)
    store.clear_cache()


def record(
    symbol: str, origin: pd.Timestamp, horizon: int, *, request_id: str = "r1", seed: int = 1,
    level: float = 100.0, quantiles=(0.1, 0.5, 0.9), spread: float = 0.02,
    calibration: CalibrationStamp | None = None, last_close: float | None = None,
    source: str = "store", series_hash: str | None = None, paths=None, features=("close",),
    request_time=None,
) -> ForecastRecord:
    """A forecast of ``horizon`` daily steps after ``origin``: the mean around ``level``, the
    quantiles spread by ``spread`` per unit normal quantile."""
    rng = np.random.default_rng(seed)
    steps = pd.date_range(origin + pd.Timedelta(days=1), periods=horizon, freq="D")
    mean = level * np.exp(rng.normal(0, 0.01, horizon))  # (H,)
    qs = {q: {f: mean * np.exp(spread * Z[q]) for f in features} for q in quantiles}
    return ForecastRecord(
        request_id=request_id, symbol=symbol, origin=origin, timestamps=list(steps),
        mean={f: mean for f in features}, quantiles=qs, model_sha256=SHA, model_name="test-model",
        request_time=request_time, calibration=calibration, last_close=last_close, frequency=FREQ,
        source=source, series_hash=series_hash, paths=paths)


__all__ = ["FEATURES", "FREQ", "SHA", "START", "append", "candles", "make_store", "record"]
