"""The forecasting check of a fine-tune: the close's CRPS and MASE on a fixed set of validation
windows, before training and after, so a run from a checkpoint keeps whichever forecasts better.

The windows are the run's own validation windows (``split_windows``; never a training row),
``windows`` of them evenly spread over the list, each cut into its lookback (the context the
forecast sees) and the first ``horizon`` rows after it (the truth). Forecasts come from the
project's predictor (``KronosPredictor.forecast``: the cached engine, ``paths`` sample paths per
window, seeded, so both checks draw the same way) and are scored with ``kronos_core.eval.metrics``:

* ``crps_scaled``: the CRPS of the close's sample paths divided by the window's in-sample naive
  MAE (``mase_scale``), so that series of any price level average together; lower is better;
* ``mase``: the absolute error of the mean path over the same scale (MASE);
* ``naive_mase``: the MASE of the last value on the same windows, for reference (1.0 on a
  random walk).

``decide`` keeps the trained weights when their figure (``metric``: ``crps_scaled`` by
default) is no worse than the starting weights'; a forecast that fails or is not finite counts
as worse.
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
    return {"crps_scaled": _finite_mean(crps),
            "mase": _finite_mean(m.scaled_errors(point, truth, scale)),
            "naive_mase": _finite_mean(m.scaled_errors(last, truth, scale))}


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


def decide(before: dict, after: dict, metric: str) -> str:
    """"trained" when the trained weights' ``metric`` is no worse than the starting weights',
    else "init"."""
    if metric not in METRICS:
        raise ValueError(f"unknown forecasting-check metric {metric!r}; use one of {METRICS}")
    if math.isinf(_value(after, metric)) and math.isinf(_value(before, metric)):
        return "trained"  # neither forecasts: the check cannot tell, training stands
    return "trained" if _value(after, metric) <= _value(before, metric) else "init"
