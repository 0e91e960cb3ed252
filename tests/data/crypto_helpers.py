"""A synthetic round-the-clock (crypto) candle frame, shared by the data, eval and service tests."""

from __future__ import annotations

import numpy as np
import pandas as pd


def crypto_frame(start="2018-01-20 00:00", days=11, step="5min", seed=0) -> pd.DataFrame:
    """Candles every ``step`` day and night, weekends too, as a crypto exchange publishes."""
    ts = pd.date_range(start, periods=int(pd.Timedelta(days=days) / pd.Timedelta(step)), freq=step)
    rng = np.random.default_rng(seed)
    close = 0.5 * np.exp(np.cumsum(rng.normal(0, 1e-3, len(ts))))
    return pd.DataFrame({"timestamps": ts, "open": close, "high": close * 1.001,
                         "low": close * 0.999, "close": close, "volume": 10.0,
                         "amount": 10.0 * close})
