"""Forecast inputs cut from a candle frame, shared by the predictor and engine tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.base.candles import FEATURES


def windows(df: pd.DataFrame, starts, lookbacks, horizon: int):
    """``(values, x_timestamps, y_timestamps)`` for ``KronosPredictor.forecast``: series i is
    ``lookbacks[i]`` candles of ``df`` from row ``starts[i]``, its future the next ``horizon``
    stamps."""
    values, xs, ys = [], [], []
    for s, lb in zip(starts, lookbacks):
        part = df.iloc[s : s + lb + horizon]
        values.append(part.iloc[:lb][list(FEATURES)].to_numpy(np.float32))  # (lb, 6)
        xs.append(pd.DatetimeIndex(part["timestamps"].iloc[:lb]))
        ys.append(pd.DatetimeIndex(part["timestamps"].iloc[lb:]))
    return values, xs, ys
