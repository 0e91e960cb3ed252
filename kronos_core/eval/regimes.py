"""Market regime at a forecast origin, from the history alone: bull, bear or sideways.

The trailing return over the last ``window`` bars (20 by default) is measured in
units of the volatility it would have by chance::

    trend = log(close[-1] / close[-1 - window]) / (sigma * sqrt(window))

where ``sigma`` is the standard deviation of the last ``window`` one-bar log
returns. Under a driftless random walk ``trend`` is roughly standard normal, so
the thresholds are in "standard deviations of noise":

* ``bull``: trend > +0.5 (the trailing rise is half a noise sigma or more);
* ``bear``: trend < -0.5;
* ``sideways``: otherwise (about 38% of windows of a pure random walk).

The same rule applies to every frequency because it is scale-free.
"""

from __future__ import annotations

import numpy as np

REGIME_WINDOW = 20
REGIME_THRESHOLD = 0.5
REGIMES = ("bull", "bear", "sideways")


def trend_score(history: np.ndarray, window: int = REGIME_WINDOW) -> np.ndarray:
    """Trailing log return over ``window`` bars / (its noise sigma) per window (N,)."""
    h = np.asarray(history, dtype=np.float64)
    if h.shape[1] < window + 1:
        raise ValueError(f"regimes need a lookback of at least {window + 1}, got {h.shape[1]}")
    logs = np.log(h[:, -window - 1:])  # (N, window + 1)
    rets = np.diff(logs, axis=1)  # (N, window)
    sigma = rets.std(axis=1, ddof=1)
    total = logs[:, -1] - logs[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = total / (sigma * np.sqrt(window))
    return np.where(sigma > 0, t, 0.0)


def classify(
    history: np.ndarray, window: int = REGIME_WINDOW, threshold: float = REGIME_THRESHOLD
) -> np.ndarray:
    """Regime label per window (N,) of str: bull, bear or sideways."""
    t = trend_score(history, window)
    return np.where(t > threshold, "bull", np.where(t < -threshold, "bear", "sideways"))
