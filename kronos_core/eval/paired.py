"""Paired tests of two forecasters on the same windows: Diebold–Mariano with a HAC variance.

For windows i = 1..n (sorted by series, then origin), ``d_i = loss_A(i) - loss_B(i)``; a negative
mean says A is better. The test (Diebold & Mariano 1995) is

    DM = mean(d) / sqrt(V / n),   V = gamma_0 + 2 sum_{k=1..K} (1 - k / (K + 1)) gamma_k

with ``gamma_k`` the lag-k autocovariance of ``d`` (the Newey–West / Bartlett HAC estimate of the
long-run variance), K = max(h - 1, floor(4 (n / 100)^(2/9))). The statistic gets the small-sample
correction of Harvey, Leybourne & Newbold (1997), sqrt((n + 1 - 2h + h (h - 1) / n) / n), and a
two-sided p-value from Student's t with n - 1 degrees of freedom.

Losses compared (per window, averaged over its h steps, each divided by the window's MASE scale —
the in-sample mean absolute one-step change of its context — so series at different price levels
weigh alike):

* ``crps``: the CRPS of the forecast distribution (the fair estimator for sampled forecasters);
* ``abs_error``: the absolute error of the point forecast (the terms of MASE).

What the test assumes: the HAC variance covers correlation between neighbouring windows of one
series; windows of different series on the same dates (one market moving together) are treated as
independent, so with many series of one market the p-values are optimistic.
"""

from __future__ import annotations

import math

import numpy as np

from kronos_core.eval import metrics as m

METHOD = ("Diebold-Mariano, Newey-West (Bartlett) HAC variance, Harvey-Leybourne-Newbold "
          "correction, two-sided p-value from t(n-1)")


def window_losses(samples: np.ndarray, point: np.ndarray, truth: np.ndarray,
                  history: np.ndarray, crps_estimator: str = m.FAIR) -> dict[str, np.ndarray]:
    """Per-window scaled losses (N,) of one forecaster: ``crps`` and ``abs_error`` (module
    docstring). samples (N, S, H), point (N, H), truth (N, H), history (N, L);
    ``crps_estimator``: ``m.FAIR`` for random draws, ``m.PLUG_IN`` for a grid or a point."""
    scale = m.mase_scale(history)[:, None]  # (N, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        crps = (m.crps_elements(samples, truth, crps_estimator) / scale).mean(axis=1)
        ae = (m.abs_errors(point, truth) / scale).mean(axis=1)
    return {"crps": crps, "abs_error": ae}


def hac_variance(d: np.ndarray, lags: int) -> float:
    """Newey–West long-run variance of ``d`` (n,) with Bartlett weights up to ``lags``."""
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    x = d - d.mean()
    v = float(x @ x) / n
    for k in range(1, min(lags, n - 1) + 1):
        v += 2.0 * (1.0 - k / (lags + 1)) * float(x[k:] @ x[:-k]) / n
    return v


def default_lags(n: int, horizon: int) -> int:
    return max(horizon - 1, int(math.floor(4 * (n / 100.0) ** (2.0 / 9.0))))


def diebold_mariano(loss_a: np.ndarray, loss_b: np.ndarray, horizon: int = 1,
                    lags: int | None = None) -> dict:
    """The test of ``loss_a - loss_b`` (both (n,), same windows, same order); windows where
    either loss is not finite are left out. Returns the mean difference, the statistic, the
    p-value, n and the lags (``default_lags`` unless given); ``p_value`` None when it cannot be
    computed."""
    from scipy.stats import t as student_t

    a, b = np.asarray(loss_a, dtype=np.float64), np.asarray(loss_b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    n = len(d)
    out: dict = {"windows": n, "mean_a": float(a[ok].mean()) if n else None,
                 "mean_b": float(b[ok].mean()) if n else None,
                 "mean_difference": float(d.mean()) if n else None,
                 "statistic": None, "p_value": None, "lags": None}
    if n < 3:
        return out
    lags = default_lags(n, horizon) if lags is None else lags
    var = hac_variance(d, lags)
    out["lags"] = lags
    if var <= 0:  # identical losses: no evidence either way
        out["statistic"], out["p_value"] = 0.0, 1.0
        return out
    dm = d.mean() / math.sqrt(var / n)
    hln = math.sqrt(max((n + 1 - 2 * horizon + horizon * (horizon - 1) / n) / n, 1e-12))
    stat = float(dm * hln)
    out["statistic"] = stat
    out["p_value"] = float(2 * student_t.sf(abs(stat), df=n - 1))
    return out


def compare(losses_a: dict[str, np.ndarray], losses_b: dict[str, np.ndarray],
            horizon: int) -> dict[str, dict]:
    """``diebold_mariano`` of every loss the two forecasters share (``crps``, ``abs_error``)."""
    return {k: diebold_mariano(losses_a[k], losses_b[k], horizon)
            for k in losses_a if k in losses_b}
