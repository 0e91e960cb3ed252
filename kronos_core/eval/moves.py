"""Fit the move correction (``kronos_core.base.moves``) on windows with known truth.

Per horizon step h, over N windows with sample paths and the truth:

* ``lambda[h]``: least squares of the realised move ``truth_h / last - 1`` on the model's mean
  path move ``m_h`` through the origin, ``sum(m r) / sum(m^2)``, clipped to [0.01, 1]
  (``LAMBDA_FLOOR``): how much of the model's centre move the truth bore out (near 0: none, the
  last value is the better centre; never 0, which would tie every symbol's forecast).
* ``kappa[h]``: with that lambda, the spread scale at which the mean over windows of the corrected
  paths' mean |return| equals the realised mean |return| (as ``kronos_core.eval.volatility``
  measures move sizes). That mean is convex in kappa, so the level set below the target is an
  interval holding 0 and a bisection finds the one crossing; when even kappa 0 moves more than the
  truth did, kappa is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kronos_core.base.moves import KAPPA_MAX, MoveCorrection

BISECTION_STEPS = 60


@dataclass(frozen=True)
class StepFit:
    """One horizon step's fit and what it did on the windows it was fitted on."""

    step: int  # 1 = the first forecast step
    lam: float
    kappa: float
    windows: int
    realised_abs_return: float  # mean over windows of |truth_h / last - 1|
    raw_abs_return: float  # mean over windows of the raw paths' mean |return|
    corrected_abs_return: float  # the same of the corrected paths
    raw_mae_over_last: float  # mean |raw centre - truth| / mean |last - truth|
    corrected_mae_over_last: float  # the same with the corrected centre

    def as_dict(self) -> dict:
        return {"step": self.step, "lambda": round(self.lam, 5), "kappa": round(self.kappa, 5),
                "windows": self.windows,
                "realised_abs_return": round(self.realised_abs_return, 6),
                "raw_abs_return": round(self.raw_abs_return, 6),
                "corrected_abs_return": round(self.corrected_abs_return, 6),
                "raw_mae_over_last": round(self.raw_mae_over_last, 5),
                "corrected_mae_over_last": round(self.corrected_mae_over_last, 5)}


LAMBDA_FLOOR = 0.01  # a common shrink to 0 would erase the order of the symbols' forecasts


def fit_lambda(centre: np.ndarray, realised: np.ndarray) -> float:
    """Least squares of ``realised`` (N,) on ``centre`` (N,) through the origin, clipped to
    [``LAMBDA_FLOOR``, 1]; 1 (leave it) when the model never moves. The floor: at lambda 0 every
    series' forecast move is 0, so a portfolio's expected returns all tie and the model's
    ranking of the symbols (the cross-section) is lost; at 0.01 the order survives while the
    point forecast stays within 1% of the model's move from the last value."""
    m = np.asarray(centre, dtype=np.float64)
    r = np.asarray(realised, dtype=np.float64)
    denom = float((m * m).sum())
    if denom <= 0:
        return 1.0
    return float(np.clip((m * r).sum() / denom, LAMBDA_FLOOR, 1.0))


def mean_abs_return(returns: np.ndarray, lam: float, kappa: float) -> float:
    """Mean over windows of the mean over paths of |corrected return|; ``returns`` (N, S)."""
    centre = returns.mean(axis=1, keepdims=True)  # (N, 1)
    return float(np.abs(lam * centre + kappa * (returns - centre)).mean())


def fit_kappa(returns: np.ndarray, lam: float, target: float) -> float:
    """The spread scale in [0, ``KAPPA_MAX``] whose corrected mean |return| of ``returns`` (N, S)
    equals ``target`` (module docstring)."""
    r = np.asarray(returns, dtype=np.float64)
    if mean_abs_return(r, lam, 0.0) >= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while mean_abs_return(r, lam, hi) < target:
        if hi >= KAPPA_MAX:
            return KAPPA_MAX
        lo, hi = hi, min(2 * hi, KAPPA_MAX)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mean_abs_return(r, lam, mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_moves(close_paths: np.ndarray, truth: np.ndarray,
              last: np.ndarray) -> tuple[MoveCorrection, list[StepFit]]:
    """Fit lambda and kappa at every step of ``close_paths`` (N, S, H) against ``truth`` (N, H),
    both from ``last`` (N,) (the close each window starts from). Windows with a non-finite value
    or a last close not above 0 are left out; at least 2 paths and 3 windows are needed."""
    x = np.asarray(close_paths, dtype=np.float64)  # (N, S, H)
    y = np.asarray(truth, dtype=np.float64)  # (N, H)
    base = np.asarray(last, dtype=np.float64)  # (N,)
    if x.ndim != 3 or y.shape != (x.shape[0], x.shape[2]) or base.shape != (x.shape[0],):
        raise ValueError(f"paths (N, S, H), truth (N, H), last (N,) expected; got {x.shape}, "
                         f"{y.shape}, {base.shape}")
    if x.shape[1] < 2:
        raise ValueError("the move correction needs at least 2 sample paths per window")
    ok = np.isfinite(x).all(axis=(1, 2)) & np.isfinite(y).all(axis=1) & np.isfinite(base) \
        & (base > 0)
    if ok.sum() < 3:
        raise ValueError(f"only {int(ok.sum())} usable windows; at least 3 are needed")
    x, y, base = x[ok], y[ok], base[ok]
    returns = x / base[:, None, None] - 1.0  # (n, S, H)
    realised = y / base[:, None] - 1.0  # (n, H)
    lams, kappas, fits = [], [], []
    for h in range(x.shape[2]):
        r = returns[:, :, h]  # (n, S)
        centre = r.mean(axis=1)  # (n,)
        target = float(np.abs(realised[:, h]).mean())
        lam = fit_lambda(centre, realised[:, h])
        kappa = fit_kappa(r, lam, target)
        lams.append(lam)
        kappas.append(kappa)
        last_err = float(np.abs(realised[:, h]).mean())
        fits.append(StepFit(
            h + 1, lam, kappa, int(len(r)), target, mean_abs_return(r, 1.0, 1.0),
            mean_abs_return(r, lam, kappa),
            float(np.abs(centre - realised[:, h]).mean()) / last_err if last_err > 0 else 1.0,
            float(np.abs(lam * centre - realised[:, h]).mean()) / last_err
            if last_err > 0 else 1.0,
        ))
    return MoveCorrection(tuple(lams), tuple(kappas)), fits

