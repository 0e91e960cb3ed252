"""Walk-forward windows (rolling forecast origins) and their batched forecasts.

A window has an *origin* row ``t`` of one series: its context is rows
``[t - lookback, t)`` and its truth rows ``[t, t + horizon)``. Only the context
(values and stamps) reaches the forecast; the future timestamps are extrapolated
from the context on the series' calendar (its metadata: exchange, or the ``24/7`` the
store inferred from the whole history, as the service reads them), else from the
context's own trading sessions, never read from the data, so nothing at or after an
origin can influence the forecast made there.

Origins are counted back from the end of each series: the last window's truth
ends at the last row (or before ``end``), and each earlier origin is ``step``
rows before the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import PriceLimitRule, rule_for
from kronos_core.data.timestamps import future_options, future_timestamps, template_history
from kronos_core.eval.data import Series

log = logging.getLogger(__name__)


@dataclass
class Windows:
    """N windows over one or more series, all with the same lookback L and horizon H."""

    series_index: np.ndarray  # (N,) which series
    origins: np.ndarray  # (N,) origin row in that series
    context: np.ndarray  # (N, L, 6) float32 candles before the origin
    context_ts: list[pd.DatetimeIndex]  # N x (L,) their stamps
    future_ts: list[pd.DatetimeIndex]  # N x (H,) stamps extrapolated from the context
    truth: np.ndarray  # (N, H, 6) float32 candles from the origin on
    names: list[str]  # series names (indexed by series_index)
    # each series' daily price-limit rule (indexed by series_index; empty: none has one)
    price_limits: list[PriceLimitRule | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.origins)

    def subset(self, idx) -> Windows:
        idx = np.asarray(idx)
        return Windows(self.series_index[idx], self.origins[idx], self.context[idx],
                       [self.context_ts[i] for i in idx], [self.future_ts[i] for i in idx],
                       self.truth[idx], self.names, self.price_limits)

    def rules(self, lo: int, hi: int) -> list[PriceLimitRule | None]:
        """The price-limit rule of windows ``lo..hi`` (None each: no limit)."""
        if not self.price_limits:
            return [None] * (hi - lo)
        return [self.price_limits[k] for k in self.series_index[lo:hi]]


def origins_for(n_rows: int, lookback: int, horizon: int, windows: int, step: int,
                first: int = 0, stop: int | None = None) -> np.ndarray:
    """Origin rows (ascending): up to ``windows`` of them, ``step`` apart, the last one's
    truth ending at ``stop`` (default ``n_rows``); none before ``max(lookback, first)``."""
    if lookback < 1 or horizon < 1 or windows < 1 or step < 1:
        raise ValueError(f"lookback, horizon, windows and step must be >= 1, got "
                         f"{lookback}, {horizon}, {windows}, {step}")
    last = min(n_rows, n_rows if stop is None else stop) - horizon
    lo = max(lookback, first)
    out = [o for o in (last - j * step for j in range(windows)) if o >= lo]
    return np.array(sorted(out), dtype=np.int64)


def spread_origins(n_rows: int, lookback: int, horizon: int, windows: int, first: int = 0,
                   stop: int | None = None) -> np.ndarray:
    """Up to ``windows`` origins spread evenly from the first usable row (``max(lookback,
    first)``) to the last (truth ending at ``stop``, default ``n_rows``), at least ``horizon``
    apart (so truths never overlap; fewer windows when the period is short)."""
    lo = max(lookback, first)
    hi = min(n_rows, n_rows if stop is None else stop) - horizon
    if hi < lo:
        return np.zeros(0, dtype=np.int64)
    count = min(windows, (hi - lo) // horizon + 1)
    if count <= 1:
        return np.array([hi], dtype=np.int64)
    return np.unique(np.round(np.linspace(lo, hi, count)).astype(np.int64))


def _per_series(value, n: int, what: str) -> list:
    """``value`` (one for all, or a sequence with one entry per series) as a list of ``n``."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what}: {len(value)} values for {n} series")
        return list(value)
    return [value] * n


def build_windows(series: Sequence[Series], lookback: int, horizon: int, windows: int,
                  step: int | None = None, start=None, end=None,
                  last_fraction: float | None = None, spread: bool = False) -> Windows:
    """Windows of every series. start: origins at or after this time; end: truths before it
    (each a time, or a list with one per series, None entries meaning no limit); last_fraction:
    origins only in the last fraction of each series' rows. spread: instead of ``step`` apart,
    the windows are spread evenly over the chosen period (``spread_origins``), so a few windows
    sample a long period."""
    rows: list[tuple[int, int]] = []  # (series, origin row)
    starts = _per_series(start, len(series), "start")
    ends = _per_series(end, len(series), "end")
    for k, s in enumerate(series):
        stamps = s.timestamps
        first = 0 if starts[k] is None else int(stamps.searchsorted(pd.Timestamp(starts[k])))
        if last_fraction is not None:
            first = max(first, int(len(s) * (1 - last_fraction)))
        stop = None if ends[k] is None else int(stamps.searchsorted(pd.Timestamp(ends[k]), "left"))
        k_step = step or horizon
        if spread:
            origins = spread_origins(len(s), lookback, horizon, windows, first, stop)
        else:
            origins = origins_for(len(s), lookback, horizon, windows, k_step, first, stop)
        if len(origins) < windows:
            log.warning("%s: %d of %d windows fit (rows %d, lookback %d, horizon %d, step %d)",
                        s.name, len(origins), windows, len(s), lookback, horizon, k_step)
        rows.extend((k, int(o)) for o in origins)
    if not rows:
        raise ValueError(
            f"no window fits: series need more than lookback + horizon = {lookback + horizon} rows "
            "in the chosen period"
        )
    idx = np.array([k for k, _ in rows])
    org = np.array([o for _, o in rows])
    context = np.stack([series[k].values[o - lookback:o] for k, o in rows])  # (N, L, 6)
    truth = np.stack([series[k].values[o:o + horizon] for k, o in rows])  # (N, H, 6)
    ctx_ts = [series[k].timestamps[o - lookback:o] for k, o in rows]
    # the calendar of each series' metadata, as the service reads it (future_options); without
    # one, sessions learned from the history before the origin, as the service learns them
    fut_ts = []
    for (k, o), ts in zip(rows, ctx_ts):
        learn = template_history(series[k].timestamps, o, series[k].meta)
        fut_ts.append(future_timestamps(ts if learn is None else learn, horizon,
                                        **future_options(series[k].meta)))
    # each series' daily price limit, from its name and metadata as the service reads them
    rules = [rule_for(s.name, s.meta) for s in series]
    return Windows(idx, org, context, ctx_ts, fut_ts, truth, [s.name for s in series], rules)


def forecast_windows(predictor, w: Windows, horizon: int, sample_count: int, seed: int = 0,
                     batch_size: int | None = None, progress: bool = True, *,
                     temperature: float | None = None, top_p: float | None = None,
                     price_limits: bool = True,
                     move_correction: bool = True) -> tuple[np.ndarray, float]:
    """Sample paths (N, S, H, 6) of every window, ``batch_size`` windows per engine call (None:
    the predictor's ``series_per_call``), with the model's move correction (``predictor.moves``)
    unless ``move_correction`` is False, each held inside its series' daily price limit
    (``Windows.price_limits``) unless ``price_limits`` is False.

    Seeded per window content, so a window's paths do not depend on the batch
    around it. ``temperature`` / ``top_p`` None: the predictor's (its model's sampling
    defaults). Returns the paths and the seconds spent forecasting.
    """
    n = len(w)
    out = np.empty((n, sample_count, horizon, w.context.shape[2]), dtype=np.float32)
    t0 = time.perf_counter()
    options = ForecastOptions(horizon, sample_count=sample_count, seed=seed,
                              temperature=temperature, top_p=top_p, price_limits=price_limits,
                              move_correction=move_correction)
    if not batch_size:
        batch_size = predictor.series_per_call(w.context.shape[1], horizon, sample_count)
    bar = tqdm(total=n, unit="win", desc="forecast", disable=not progress)
    for lo in range(0, n, batch_size):
        hi = min(n, lo + batch_size)
        res = predictor.forecast(
            list(w.context[lo:hi]), w.context_ts[lo:hi], w.future_ts[lo:hi], options,
            price_limits=w.rules(lo, hi),
        )
        out[lo:hi] = res.paths  # (b, S, H, 6)
        bar.update(hi - lo)
    bar.close()
    return out, time.perf_counter() - t0
