"""The forecasting check of a fine-tune: the close's CRPS and MASE on a fixed set of validation
windows, before training and after, so a run from a checkpoint keeps whichever forecasts better.

The windows are the run's own validation windows (``split_windows``; never a training row),
``windows`` of them evenly spread over the list, each cut into its lookback (the context the
forecast sees) and the first ``horizon`` rows after it (the truth). Forecasts come from the
project's predictor (``KronosPredictor.forecast``: the cached engine, ``paths`` sample paths per
window, seeded, so both checks draw the same way) and are scored with ``kronos_core.eval.metrics``:

* ``crps_scaled``: the fair (unbiased) ensemble CRPS of the close's sample paths (as ``kronos
  eval`` scores them) divided by the window's in-sample naive MAE (``mase_scale``), so that series
  of any price level average together; lower is better;
* ``mase``: the absolute error of the mean path over the same scale (MASE);
* ``naive_mase``: the MASE of the last value on the same windows, for reference (1.0 on a
  random walk).

``decide`` compares the two per window, paired (``kronos_core.eval.paired.diebold_mariano`` on
the windows' ``metric`` losses: ``crps_scaled`` by default): the starting weights are put back only
when the trained weights forecast worse with a one-sided p-value below ``alpha`` (0.05); a
difference the check cannot tell from noise keeps the trained weights, which the validation loss
chose. The decision states the check's size (windows x paths), the mean difference with its 95%
interval and the p-value. A forecast that fails or is not finite counts as worse.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from kronos_core.base.candles import FEATURES
from kronos_core.eval import metrics as m

log = logging.getLogger(__name__)

CLOSE = FEATURES.index("close")
METRICS = ("crps_scaled", "mase")
ALPHA = 0.05  # one-sided level at which worse forecasts put the starting weights back
CHUNK = 32  # windows per engine call (x paths sequences), to bound the engine's memory


@dataclass
class CheckWindows:
    """N validation windows cut for forecasting: lookback L, horizon H."""

    context: list[np.ndarray]  # N x (L, 6) float32 candles
    context_ts: list[pd.DatetimeIndex]  # N x (L,)
    future_ts: list[pd.DatetimeIndex]  # N x (H,) the truth rows' own times
    truth: np.ndarray  # (N, H, 6) float32

    def __len__(self) -> int:
        return len(self.context)


def check_windows(series: Sequence, val_index: Sequence[tuple[int, int]], lookback: int,
                  horizon: int, count: int) -> CheckWindows | None:
    """Up to ``count`` of the validation windows ``(series, start)``, evenly spread; None when
    there is none (or the series carry no timestamps, e.g. a hand-built list)."""
    usable = [(sid, start) for sid, start in val_index if series[sid].timestamps is not None]
    if not usable or count < 1:
        return None
    picks = np.unique(np.linspace(0, len(usable) - 1, min(count, len(usable))).round().astype(int))
    context, context_ts, future_ts, truth = [], [], [], []
    for i in picks:
        sid, start = usable[i]
        s, cut = series[sid], start + lookback
        context.append(np.asarray(s.values[start:cut], dtype=np.float32))
        context_ts.append(pd.DatetimeIndex(s.timestamps[start:cut]))
        future_ts.append(pd.DatetimeIndex(s.timestamps[cut:cut + horizon]))
        truth.append(np.asarray(s.values[cut:cut + horizon], dtype=np.float32))
    return CheckWindows(context, context_ts, future_ts, np.stack(truth))


def _finite_mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def score_paths(paths: np.ndarray, windows: CheckWindows) -> dict:
    """Figures of the close from sample paths (N, S, H, 6) (module docstring)."""
    history = np.stack([c[:, CLOSE] for c in windows.context])  # (N, L)
    truth = windows.truth[:, :, CLOSE]  # (N, H)
    scale = m.mase_scale(history)  # (N,)
    with np.errstate(divide="ignore", invalid="ignore"):
        crps = m.crps_elements(paths[..., CLOSE], truth) / scale[:, None]  # (N, H)
    point = paths[..., CLOSE].mean(axis=1)  # (N, H)
    last = np.repeat(history[:, -1:], truth.shape[1], axis=1)  # (N, H) the last value, held
    abs_scaled = m.scaled_errors(point, truth, scale)  # (N, H)
    with np.errstate(invalid="ignore"):  # a window with no finite step stays NaN
        per_window = {"crps_scaled": np.nanmean(crps, axis=1),  # (N,)
                      "mase": np.nanmean(abs_scaled, axis=1)}
    return {"crps_scaled": _finite_mean(crps),
            "mase": _finite_mean(abs_scaled),
            "naive_mase": _finite_mean(m.scaled_errors(last, truth, scale)),
            # per window, for the paired test of ``decide`` (NaN written as null)
            "per_window": {k: [float(x) if np.isfinite(x) else None for x in v]
                           for k, v in per_window.items()}}


def forecast_figures(model, tokenizer, windows: CheckWindows, *, paths: int, seed: int,
                     device: torch.device, max_context: int, clip: float) -> dict:
    """Forecast every window with ``model`` + ``tokenizer`` and score it. The modules are left
    in eval mode (the caller puts a module it trains back in train mode). A forecast that
    raises (diverged weights: NaN logits) gives figures of None and the error."""
    from kronos_core.base.options import ForecastOptions
    from kronos_core.predictor import KronosPredictor

    started = time.perf_counter()
    horizon = windows.truth.shape[1]
    out: dict = {"windows": len(windows), "paths": paths, "horizon": horizon}
    try:
        predictor = KronosPredictor(model, tokenizer, device=device, max_context=max_context,
                                    clip=clip)
        options = ForecastOptions(horizon, sample_count=paths, seed=seed)
        parts = []
        for lo in range(0, len(windows), CHUNK):  # seeded per window: chunks change nothing
            hi = lo + CHUNK
            parts.append(predictor.forecast(windows.context[lo:hi], windows.context_ts[lo:hi],
                                            windows.future_ts[lo:hi], options).paths)
        out.update(score_paths(np.concatenate(parts), windows))  # paths (N, S, H, 6)
    except (RuntimeError, ValueError) as exc:
        log.warning("forecasting check: the forecast failed (%s); counted as worst", exc)
        out.update({k: None for k in (*METRICS, "naive_mase")}, error=str(exc).splitlines()[0])
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _value(figures: dict, metric: str) -> float:
    v = figures.get(metric)
    return float(v) if v is not None and math.isfinite(v) else math.inf


def _losses(figures: dict, metric: str) -> np.ndarray | None:
    """The per-window losses of ``metric`` (None as NaN), or None when the figures have none."""
    per = (figures.get("per_window") or {}).get(metric)
    if not per:
        return None
    return np.array([np.nan if v is None else v for v in per], dtype=np.float64)


def _interval(test: dict, windows: int) -> list[float] | None:
    """The 95% interval of the mean difference that matches the test's statistic (its HAC
    standard error, t with n - 1 degrees of freedom); None when it cannot be computed."""
    from scipy.stats import t as student_t

    mean, stat = test.get("mean_difference"), test.get("statistic")
    if mean is None or stat is None or windows < 3:
        return None
    if stat == 0:
        return [mean, mean]
    half = float(student_t.ppf(0.975, windows - 1)) * abs(mean / stat)
    return [mean - half, mean + half]


def decide(before: dict, after: dict, metric: str, alpha: float = ALPHA) -> dict:
    """Which weights ``best/`` keeps, and why: ``{"kept": "trained" | "init", "reason", "test"}``.

    "init" (the starting weights) only when the trained weights forecast worse with evidence: the
    paired test of their per-window ``metric`` losses (after - before) has a positive mean and a
    one-sided p-value below ``alpha``; or the trained weights' forecast failed and the starting
    weights' did not. ``test`` holds the windows compared, the means, the mean difference, its
    95% interval, the one-sided p-value and the method. Figures without per-window losses (a run
    resumed from an older check file) fall back to comparing the means, and say so."""
    from kronos_core.eval.paired import METHOD, diebold_mariano

    if metric not in METRICS:
        raise ValueError(f"unknown forecasting-check metric {metric!r}; use one of {METRICS}")
    a, b = _value(after, metric), _value(before, metric)
    if math.isinf(a) and math.isinf(b):  # neither forecasts: the check cannot tell
        return {"kept": "trained", "reason": "neither forecast scored: the check cannot tell",
                "test": None}
    if math.isinf(a) or math.isinf(b):
        kept = "init" if math.isinf(a) else "trained"
        return {"kept": kept, "reason": ("the trained weights' forecast failed" if kept == "init"
                                         else "the starting weights' forecast failed"),
                "test": None}
    la, lb = _losses(after, metric), _losses(before, metric)
    if la is None or lb is None or len(la) != len(lb):
        kept = "trained" if a <= b else "init"
        return {"kept": kept, "test": None,
                "reason": f"means only (no per-window losses): {metric} {b:.4g} -> {a:.4g}"}
    horizon = int(after.get("horizon") or before.get("horizon") or 1)
    dm = diebold_mariano(la, lb, horizon)  # after - before: positive = trained worse
    n, p_two, stat = dm["windows"], dm["p_value"], dm["statistic"]
    p_worse = None if p_two is None or stat is None else (
        p_two / 2 if stat > 0 else 1 - p_two / 2)
    test = {"windows": n, "paths": after.get("paths"), "metric": metric,
            "before": dm["mean_b"], "after": dm["mean_a"],
            "mean_difference": dm["mean_difference"], "interval_95": _interval(dm, n),
            "p_value_worse": p_worse, "alpha": alpha, "method": METHOD + "; one-sided"}
    worse = p_worse is not None and p_worse < alpha and (dm["mean_difference"] or 0) > 0
    size = f"{n} windows x {after.get('paths')} paths"
    p_text = "n/a" if p_worse is None else f"{p_worse:.3g}"
    if worse:
        reason = (f"the trained weights forecast worse ({metric} {b:.4g} -> {a:.4g}, "
                  f"p = {p_text} < {alpha} on {size})")
    else:
        reason = (f"no evidence the trained weights forecast worse ({metric} {b:.4g} -> {a:.4g}, "
                  f"p = {p_text} >= {alpha} on {size})" if (dm["mean_difference"] or 0) > 0 else
                  f"the trained weights forecast no worse ({metric} {b:.4g} -> {a:.4g}, "
                  f"{size})")
    return {"kept": "init" if worse else "trained", "reason": reason, "test": test}
