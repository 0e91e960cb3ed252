"""One scorecard for a set of forecasts: every metric overall, per horizon step and per level.

``score`` is what ``kronos eval`` reports for the model and for each baseline, on
the same windows, so the numbers are directly comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kronos_core.base.options import quantile_label
from kronos_core.eval import metrics as m

DEFAULT_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
DEFAULT_COVERAGE = (0.5, 0.8, 0.9)

# A function returning quantile forecasts (Q, N, H) at the given levels; the default
# reads them off the samples, a calibrated forecast corrects them.
QuantileFn = Callable[[Sequence[float]], np.ndarray]


def _mean(x) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _per_step(x) -> list[float | None]:
    x = np.asarray(x, dtype=np.float64)
    return [_mean(x[:, h]) for h in range(x.shape[1])]


def score(
    samples: np.ndarray,
    point: np.ndarray,
    truth: np.ndarray,
    last: np.ndarray,
    history: np.ndarray,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    coverage: Sequence[float] = DEFAULT_COVERAGE,
    quantile_fn: QuantileFn | None = None,
    pit_bins: int = 10,
    crps_estimator: str = m.FAIR,
) -> dict:
    """Every metric of forecasts of one feature.

    samples (N, S, H), point (N, H), truth (N, H), last (N,), history (N, L) (the
    context the forecast saw, for the MASE scale). Returns a JSON-ready dict with
    the overall figures (``mae``, ``rmse``, ``mape``, ``mase``, ``direction_accuracy``,
    ``crps``, ``brier_up``, ``coverage``, ``pinball``, ``pit``, ``reliability``) and
    ``per_step`` lists (one value per horizon step). ``crps_estimator``: ``m.FAIR`` for random
    draws (the model, GARCH), ``m.PLUG_IN`` for a stratified grid or a point forecast; the card
    names it, and the number of paths its quantiles, coverage and P(up) came from (``paths``).
    """
    qfn = quantile_fn or (lambda levels: m.sample_quantiles(samples, levels))
    ae = m.abs_errors(point, truth)
    se = m.squared_errors(point, truth)
    crps = m.crps_elements(samples, truth, crps_estimator)
    sc = m.scaled_errors(point, truth, m.mase_scale(history))
    hits = m.direction_hits(point, truth, last)
    p_up = m.prob_up(samples, last)
    outcome = m.up_outcomes(truth, last)
    brier = m.brier_elements(p_up, outcome)
    cov, cov_steps = {}, {}
    for nominal, lo, hi in m.central_levels(coverage):
        q = qfn([lo, hi])  # (2, N, H)
        c = m.covered(q[0], q[1], truth)
        cov[f"{nominal:g}"], cov_steps[f"{nominal:g}"] = _mean(c), _per_step(c)
    qv = qfn(list(quantiles)) if len(quantiles) else np.zeros((0, *truth.shape))
    pinball = {
        quantile_label(lv): _mean(m.pinball_elements(qv[i], truth, lv))
        for i, lv in enumerate(quantiles)
    }
    mse = _mean(se)
    return {
        "windows": int(truth.shape[0]),
        "paths": int(np.shape(samples)[1]),
        "crps_estimator": crps_estimator,
        "mae": _mean(ae),
        "rmse": float(np.sqrt(mse)) if mse is not None else None,
        "mape": _mean(m.ape(point, truth)),
        "mase": _mean(sc),
        "direction_accuracy": _mean(hits),
        "crps": _mean(crps),
        "brier_up": _mean(brier),
        "coverage": cov,
        "pinball": pinball,
        "pit": m.pit_histogram(m.pit_values(samples, truth), pit_bins),
        "reliability": m.reliability_table(p_up, outcome),
        "per_step": {
            "mae": _per_step(ae),
            "rmse": [float(np.sqrt(v)) if v is not None else None for v in _per_step(se)],
            "mase": _per_step(sc),
            "crps": _per_step(crps),
            "coverage": cov_steps,
        },
    }


HEADLINE = ("mae", "rmse", "mape", "mase", "direction_accuracy", "crps", "brier_up")


def headline(card: dict) -> dict:
    """The headline figures of a scorecard (for tables and regimes)."""
    out = {k: card[k] for k in HEADLINE}
    out["coverage"] = dict(card["coverage"])
    out["windows"] = card["windows"]
    for key in ("paths", "crps_estimator"):
        if key in card:
            out[key] = card[key]
    return out
