"""Forecast scores on numpy arrays: point, probabilistic (from sample paths) and P(up).

Shapes used throughout: ``N`` forecast windows, ``S`` sample paths, ``H`` horizon steps.

* ``truth`` (N, H): the realised values;
* ``samples`` (N, S, H): the predictive distribution as sample paths (a point
  forecast is ``S = 1``);
* ``point`` (N, H): the point forecast (the mean of the paths for the model);
* ``last`` (N,): the last observed value before each window's origin.

Every ``*_elements`` function returns the per-element score (N, H) so callers can
average per horizon step (axis 0) or overall; ``summarize`` does both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# ---- point forecasts ---------------------------------------------------------------------
def point_forecast(samples, point: str = "mean") -> np.ndarray:
    """A model's point forecast (N, H) of its sample paths (N, S, H): their mean or median
    (the model's ``sampling.point``)."""
    if point not in ("mean", "median"):
        raise ValueError(f"point must be 'mean' or 'median', got {point!r}")
    x = _f64(samples)
    return np.median(x, axis=1) if point == "median" else x.mean(axis=1)


def abs_errors(point, truth) -> np.ndarray:
    """|point - truth| (N, H)."""
    return np.abs(_f64(point) - _f64(truth))


def squared_errors(point, truth) -> np.ndarray:
    """(point - truth)^2 (N, H); RMSE is the square root of their mean."""
    return (_f64(point) - _f64(truth)) ** 2


def ape(point, truth) -> np.ndarray:
    """Absolute percentage errors 100 * |point - truth| / |truth| (N, H)."""
    truth = _f64(truth)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100.0 * np.abs(_f64(point) - truth) / np.abs(truth)


def mase_scale(history, season: int = 1) -> np.ndarray:
    """In-sample MAE of the (seasonal) naive forecast on each window's history (N,).

    history (N, L): the values the forecast saw. MASE (Hyndman & Koehler 2006)
    divides the forecast's absolute errors by this scale, so 1 means "as good as
    the naive forecast was in sample".
    """
    history = _f64(history)
    if history.shape[-1] <= season:
        raise ValueError(
            f"MASE needs histories longer than the season ({season}), got {history.shape[-1]}"
        )
    return np.abs(history[:, season:] - history[:, :-season]).mean(axis=1)


def scaled_errors(point, truth, scale) -> np.ndarray:
    """|point - truth| / scale per window (N, H): averaged, this is MASE."""
    scale = _f64(scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        return abs_errors(point, truth) / scale[:, None]


def direction_hits(point, truth, last) -> np.ndarray:
    """1 where the forecast return over the horizon has the sign of the realised one (N,).

    Uses the last step: sign(point[:, -1] - last) against sign(truth[:, -1] - last).
    A forecast of no change, or a realised no change, scores 0.5 (neither right nor wrong).
    """
    f = np.sign(_f64(point)[:, -1] - _f64(last))
    t = np.sign(_f64(truth)[:, -1] - _f64(last))
    return np.where((f == 0) | (t == 0), 0.5, (f == t).astype(np.float64))


# ---- probabilistic forecasts from sample paths -----------------------------------------
FAIR = "fair"
PLUG_IN = "plug-in"
CRPS_ESTIMATORS = (FAIR, PLUG_IN)
CRPS_METHOD = {
    FAIR: "fair (unbiased) ensemble CRPS: E|X - y| - E|X - X'| / 2 over distinct pairs "
          "(scoringrules.crps_ensemble, estimator 'pwm', which equals the 'fair' form)",
    PLUG_IN: "plug-in CRPS of the samples as the distribution itself (scoringrules "
             "estimator 'qd'): for stratified quantile grids and point forecasts",
}


def crps_elements(samples, truth, estimator: str = FAIR) -> np.ndarray:
    """CRPS of each step (N, H) of sample forecasts (N, S, H); lower is better.

    ``FAIR`` (default): for S random draws of a forecaster, the unbiased estimate of the CRPS of
    the distribution they come from (Ferro 2014; Zamo & Naveau 2018). The plug-in estimate counts
    each draw against itself and exceeds it by E|X - X'| / (2S) in expectation, so it penalises a
    forecaster for the number of paths it was scored from. ``PLUG_IN``: the CRPS of the S values
    taken as the distribution (a stratified quantile grid, a point forecast). With one sample both
    are the absolute error. The arithmetic is scoringrules' (``crps_ensemble``).
    """
    import scoringrules as sr

    if estimator not in CRPS_ESTIMATORS:
        raise ValueError(f"CRPS estimator must be one of {CRPS_ESTIMATORS}, got {estimator!r}")
    x = _f64(samples)  # (N, S, H)
    y = _f64(truth)  # (N, H)
    if x.shape[1] == 1:
        return np.abs(x[:, 0, :] - y)
    # pwm is the fair estimator in O(S log S); qd the plug-in one (equal to the energy form)
    form = "pwm" if estimator == FAIR else "qd"
    return np.asarray(sr.crps_ensemble(y, np.moveaxis(x, 1, -1), m_axis=-1, estimator=form),
                      dtype=np.float64)


def sample_quantiles(samples, levels: Sequence[float]) -> np.ndarray:
    """Quantiles of the samples (Q, N, H) at ``levels`` (linear interpolation)."""
    return np.quantile(_f64(samples), list(levels), axis=1)


def pinball_elements(quantile_values, truth, level: float) -> np.ndarray:
    """Pinball (quantile) loss of one quantile forecast (N, H):
    level * (y - q) if y >= q else (1 - level) * (q - y)."""
    diff = _f64(truth) - _f64(quantile_values)
    return np.maximum(level * diff, (level - 1.0) * diff)


def central_levels(coverage_levels: Sequence[float]) -> list[tuple[float, float, float]]:
    """(nominal, lower level, upper level) of each central interval, e.g. 0.8 -> (0.8, 0.1, 0.9)."""
    out = []
    for c in coverage_levels:
        if not 0 < c < 1:
            raise ValueError(f"central interval levels must be in (0, 1), got {c}")
        out.append((float(c), round((1 - c) / 2, 10), round((1 + c) / 2, 10)))
    return out


def covered(lower, upper, truth) -> np.ndarray:
    """1.0 where lower <= truth <= upper (N, H)."""
    truth = _f64(truth)
    return ((truth >= _f64(lower)) & (truth <= _f64(upper))).astype(np.float64)


def pit_values(samples, truth) -> np.ndarray:
    """Probability integral transform (N, H): the share of samples below the truth,
    ties counted half. A calibrated forecast gives uniform PIT values."""
    x = _f64(samples)
    y = _f64(truth)[:, None, :]
    return (x < y).mean(axis=1) + 0.5 * (x == y).mean(axis=1)


def pit_histogram(pit, bins: int = 10) -> dict:
    """Counts of PIT values in ``bins`` equal bins of [0, 1] and their density (1 = uniform)."""
    counts, edges = np.histogram(_f64(pit).ravel(), bins=bins, range=(0.0, 1.0))
    total = max(int(counts.sum()), 1)
    return {
        "edges": [float(e) for e in edges],
        "counts": [int(c) for c in counts],
        "density": [float(c * bins / total) for c in counts],
    }


# ---- P(up) --------------------------------------------------------------------------------
def prob_up(samples, last) -> np.ndarray:
    """P(value at the last step > last) from the samples (N,), ties counted half."""
    end = _f64(samples)[:, :, -1]  # (N, S)
    ref = _f64(last)[:, None]
    return (end > ref).mean(axis=1) + 0.5 * (end == ref).mean(axis=1)


def up_outcomes(truth, last) -> np.ndarray:
    """1.0 where the realised value at the last step is above ``last`` (N,)."""
    return (_f64(truth)[:, -1] > _f64(last)).astype(np.float64)


def brier_elements(prob, outcome) -> np.ndarray:
    """(prob - outcome)^2 (N,); the mean is the Brier score (0 best, 0.25 = always 0.5)."""
    return (_f64(prob) - _f64(outcome)) ** 2


def reliability_table(prob, outcome, bins: int = 10) -> list[dict]:
    """Per bin of forecast probability: count, mean forecast, observed frequency.

    Bins are [0, 0.1), [0.1, 0.2) ... [0.9, 1.0] for ``bins = 10``; empty bins are left out.
    A reliable forecast has observed frequency close to the mean forecast in each bin.
    """
    prob, outcome = _f64(prob), _f64(outcome)
    idx = np.minimum((prob * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        m = idx == b
        if m.any():
            rows.append({
                "bin": [b / bins, (b + 1) / bins],
                "count": int(m.sum()),
                "mean_forecast": float(prob[m].mean()),
                "observed": float(outcome[m].mean()),
            })
    return rows
