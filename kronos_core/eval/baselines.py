"""Simple forecasts every model must beat, as sample arrays (N, S, H) so they score like the model.

All work on each window's history (N, L) of one feature (close), never on the future:

* ``last_value``: the random walk, every step = the last value (S = 1);
* ``drift``: the line through the history's first and last values, extended (S = 1);
* ``seasonal_naive``: each step = the value one season earlier (S = 1), for data
  with a season (intraday: bars per day; daily: a 5-trading-day week);
* ``hist_vol``: the quantile baseline, a driftless log-normal random walk whose
  per-step volatility is the standard deviation of the last 20 log returns;
  ``S`` stratified draws (the normal quantiles at (k + 0.5) / S), so its
  quantiles are the closed-form bands up to interpolation.

A point forecast (S = 1) is a degenerate distribution: its CRPS is its absolute
error, its central intervals have zero width, its P(up) is 1, 0 or 0.5.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd

HIST_VOL_WINDOW = 20
HIST_VOL_SAMPLES = 199


def last_value(history: np.ndarray, horizon: int) -> np.ndarray:
    """(N, 1, H): the last observed value repeated."""
    h = np.asarray(history, dtype=np.float64)
    return np.repeat(h[:, -1:], horizon, axis=1)[:, None, :]


def drift(history: np.ndarray, horizon: int) -> np.ndarray:
    """(N, 1, H): last + h * (last - first) / (L - 1) (Hyndman & Athanasopoulos, FPP 5.2)."""
    h = np.asarray(history, dtype=np.float64)
    slope = (h[:, -1] - h[:, 0]) / max(h.shape[1] - 1, 1)  # (N,)
    steps = np.arange(1, horizon + 1)  # (H,)
    return (h[:, -1:] + slope[:, None] * steps[None, :])[:, None, :]


def seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """(N, 1, H): step h (1-based) = history[L - season + ((h - 1) mod season)]."""
    h = np.asarray(history, dtype=np.float64)
    if season < 1 or season > h.shape[1]:
        raise ValueError(f"season {season} must be between 1 and the lookback {h.shape[1]}")
    idx = h.shape[1] - season + (np.arange(horizon) % season)  # (H,)
    return h[:, idx][:, None, :]


def hist_vol(history: np.ndarray, horizon: int, window: int = HIST_VOL_WINDOW,
             samples: int = HIST_VOL_SAMPLES) -> np.ndarray:
    """(N, S, H): last * exp(sigma * sqrt(h) * z_k), sigma = std of the last ``window`` log
    returns."""
    h = np.asarray(history, dtype=np.float64)
    if h.shape[1] < window + 1:
        raise ValueError(f"hist_vol needs a lookback of at least {window + 1}, got {h.shape[1]}")
    if (h[:, -window - 1:] <= 0).any():
        raise ValueError("hist_vol needs positive values (log returns)")
    sigma = np.diff(np.log(h[:, -window - 1:]), axis=1).std(axis=1, ddof=1)  # (N,)
    nd = NormalDist()
    z = np.array([nd.inv_cdf((k + 0.5) / samples) for k in range(samples)])  # (S,)
    steps = np.sqrt(np.arange(1, horizon + 1))  # (H,)
    log_move = sigma[:, None, None] * z[None, :, None] * steps[None, None, :]  # (N, S, H)
    return h[:, -1][:, None, None] * np.exp(log_move)


def season_length(timestamps) -> int | None:
    """The season of a series from its stamps: bars per day for intraday data, 5 for
    daily data traded on weekdays only, 7 for daily data every day; None otherwise."""
    ts = pd.DatetimeIndex(timestamps)
    if len(ts) < 3:
        return None
    step = pd.Series(ts[1:] - ts[:-1]).mode().iloc[0]
    if step < pd.Timedelta(days=1):
        per_day = pd.Series(ts.normalize()).value_counts()
        bars = int(per_day.median())
        return bars if bars > 1 else None
    if step == pd.Timedelta(days=1):
        return 5 if ts.day_of_week.max() <= 4 or (ts.day_of_week >= 5).mean() < 0.05 else 7
    return None


def all_baselines(history: np.ndarray, horizon: int, season: int | None) -> dict[str, np.ndarray]:
    """Every applicable baseline's samples (N, S, H), by name."""
    out = {
        "last_value": last_value(history, horizon),
        "drift": drift(history, horizon),
    }
    if season and season <= np.asarray(history).shape[1]:
        out["seasonal_naive"] = seasonal_naive(history, horizon, season)
    out["hist_vol"] = hist_vol(history, horizon)
    return out
