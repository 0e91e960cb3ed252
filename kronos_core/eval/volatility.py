"""Volatility skill of a sampled forecast: does its spread rank the coming moves, and are its
moves the right size?

At horizon step h, per window (``last`` the close the forecast starts from):

* realised move: ``|truth_h / last - 1|``;
* forecast spread: the standard deviation over the paths of ``path_h / last - 1``;
* forecast move: the mean over the paths of ``|path_h / last - 1|`` (the expected absolute return).

Reported: ``spread_rank_corr``, the Spearman correlation of the spread with the realised move over
the windows (does a wider fan go with a bigger move?), and ``abs_return_ratio``, the mean forecast
move over the mean realised move (1: moves sized right; below 1: too timid). A point forecast has
no spread and gets neither.
"""

from __future__ import annotations

import numpy as np


def volatility_skill(samples: np.ndarray, truth: np.ndarray, last: np.ndarray) -> dict:
    """{"windows", "spread_rank_corr", "abs_return_ratio", "forecast_abs_return",
    "realised_abs_return"} at the last step of samples (N, S, H) against truth (N, H), from
    ``last`` (N,). Windows with a non-finite value are left out."""
    from scipy.stats import spearmanr

    x = np.asarray(samples, dtype=np.float64)[:, :, -1]  # (N, S)
    y = np.asarray(truth, dtype=np.float64)[:, -1]  # (N,)
    base = np.asarray(last, dtype=np.float64)  # (N,)
    ok = np.isfinite(x).all(axis=1) & np.isfinite(y) & np.isfinite(base) & (base > 0)
    out: dict = {"windows": int(ok.sum()), "spread_rank_corr": None, "abs_return_ratio": None,
                 "forecast_abs_return": None, "realised_abs_return": None}
    if x.shape[1] < 2 or ok.sum() < 3:
        return out
    path_ret = x[ok] / base[ok, None] - 1.0  # (n, S)
    realised = np.abs(y[ok] / base[ok] - 1.0)  # (n,)
    spread = path_ret.std(axis=1, ddof=1)  # (n,)
    forecast = np.abs(path_ret).mean(axis=1)  # (n,)
    if np.ptp(spread) > 0 and np.ptp(realised) > 0:
        out["spread_rank_corr"] = float(spearmanr(spread, realised).statistic)
    out["forecast_abs_return"] = float(forecast.mean())
    out["realised_abs_return"] = float(realised.mean())
    if out["realised_abs_return"] > 0:
        out["abs_return_ratio"] = out["forecast_abs_return"] / out["realised_abs_return"]
    return out
