"""The walk-forward portfolio backtest: a universe on one calendar, decisions, and the report.

``Universe`` aligns the series on their common timestamps. ``forecast_scores`` makes
the decision input at one rebalance row from rows before it only. ``run_backtest``
runs the model strategy, the momentum baseline and the equal-weight universe over
the same rebalance dates and costs (arithmetic in ``kronos_core.eval.backtest``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import PriceLimitRule, rule_for
from kronos_core.data.timestamps import future_timestamps
from kronos_core.eval import backtest as bt
from kronos_core.eval.data import Series

log = logging.getLogger(__name__)
CLOSE = FEATURES.index("close")


def _span(s: Series) -> str:
    if not len(s):
        return f"{s.name} (empty)"
    return f"{s.name} ({s.timestamps[0]} .. {s.timestamps[-1]}, {len(s)} rows)"


def no_overlap_message(series: Sequence[Series], shared: int, shown: int = 10) -> str:
    """Why ``series`` cannot share a calendar: the series that do not overlap, each with its
    span; when every span overlaps, the window they share and that their stamps differ."""
    head = (f"the series share fewer than 2 timestamps ({shared} in common); "
            "a backtest needs one calendar")
    full = [s for s in series if len(s)]
    empty = [s.name for s in series if not len(s)]
    if empty:
        return f"{head}: no rows in {', '.join(empty)}"
    late = max(full, key=lambda s: s.timestamps[0])
    early = min(full, key=lambda s: s.timestamps[-1])
    if late.timestamps[0] > early.timestamps[-1]:
        starts_after = [_span(s) for s in full if s.timestamps[0] > early.timestamps[-1]]
        more = f" and {len(starts_after) - shown} more" if len(starts_after) > shown else ""
        return (f"{head}: {_span(early)} ends before these start: "
                f"{'; '.join(starts_after[:shown])}{more}; "
                "leave out one side, or give series covering the same dates")
    spans = "; ".join(_span(s) for s in full[:shown])
    if len(full) > shown:
        spans += f"; {len(full) - shown} more"
    return (f"{head}: their spans overlap from {late.timestamps[0]} to {early.timestamps[-1]}, "
            "but their timestamps differ there (other times of day, or other bar frequencies): "
            f"{spans}")


@dataclass
class Universe:
    """M symbols on their T common timestamps."""

    names: list[str]
    values: np.ndarray  # (M, T, 6) float32
    timestamps: pd.DatetimeIndex  # (T,)
    # each symbol's daily price-limit rule (empty: none has one)
    price_limits: list[PriceLimitRule | None] = field(default_factory=list)

    def rules(self, symbols: Sequence[int]) -> list[PriceLimitRule | None]:
        """The price-limit rules of these symbol indices (None each: no limit)."""
        return [self.price_limits[k] if self.price_limits else None for k in symbols]

    @classmethod
    def from_series(cls, series: Sequence[Series]) -> Universe:
        common = series[0].timestamps
        for s in series[1:]:
            common = common.intersection(s.timestamps)
        if len(common) < 2:
            raise ValueError(no_overlap_message(series, len(common)))
        vals = np.stack([s.values[s.timestamps.get_indexer(common)] for s in series])  # (M, T, 6)
        dropped = {s.name: len(s) - len(common) for s in series if len(s) > len(common)}
        if dropped:
            log.info(
                "aligned on %d common timestamps (rows left out per symbol: %s)", len(common),
                dropped,
            )
        return cls([s.name for s in series], vals, pd.DatetimeIndex(common),
                   [rule_for(s.name, s.meta) for s in series])

    @property
    def closes(self) -> np.ndarray:
        return self.values[:, :, CLOSE].T.astype(np.float64)  # (T, M)


def forecast_scores(
    predictor, uni: Universe, row: int, lookback: int, horizon: int, sample_count: int,
    rank: str = "return", seed: int = 0, batch_size: int = 512,
) -> np.ndarray:
    """Scores (M,) at rebalance ``row`` from rows [row - lookback, row) only.

    rank "return": the mean forecast return to the horizon; "sharpe": that mean over
    the standard deviation of the path returns. The universe goes through the
    engine ``batch_size`` symbols per call.
    """
    ctx = uni.values[:, row - lookback:row]  # (M, L, 6)
    ts = uni.timestamps[row - lookback:row]
    fut = future_timestamps(ts, horizon)
    last = ctx[:, -1, CLOSE].astype(np.float64)  # (M,)
    scores = np.empty(len(uni.names))
    options = ForecastOptions(horizon, sample_count=sample_count, seed=seed)
    for lo in range(0, len(uni.names), batch_size):
        hi = min(len(uni.names), lo + batch_size)
        res = predictor.forecast(list(ctx[lo:hi]), [ts] * (hi - lo), [fut] * (hi - lo), options,
                                 price_limits=uni.rules(range(lo, hi)))
        scores[lo:hi] = _scores_of(res.paths[:, :, -1, CLOSE], last[lo:hi], rank)
    return scores


def _scores_of(paths_close: np.ndarray, last: np.ndarray, rank: str) -> np.ndarray:
    """Scores (b,) from the close at the horizon of b windows' paths (b, S) and their last
    closes (b,): the mean return, or for ``rank`` "sharpe" that mean over the paths' std."""
    ret = paths_close.astype(np.float64) / last[:, None] - 1.0  # (b, S)
    mean = ret.mean(axis=1)
    if rank == "sharpe":
        sd = ret.std(axis=1, ddof=1) if ret.shape[1] > 1 else np.zeros(len(ret))
        return np.where(sd > 0, mean / np.where(sd > 0, sd, 1.0), np.nan)
    return mean


def windows_per_call(predictor, lookback: int, horizon: int, sample_count: int,
                     batch_size: int | None = None) -> int:
    """Windows per engine call: ``batch_size`` when given, else the predictor's
    (``KronosPredictor.series_per_call``: sized by rows for its device and memory)."""
    if batch_size:
        return int(batch_size)
    return predictor.series_per_call(lookback, horizon, sample_count)


def forecast_scores_all(
    predictor, uni: Universe, rows: Sequence[int], lookback: int, horizon: int,
    sample_count: int, rank: str = "return", seed: int = 0, batch_size: int | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Scores (R, M) at every rebalance row of ``rows``, each from rows [row - lookback, row)
    only, as ``forecast_scores`` gives them one row at a time.

    Every date's windows are known before the first forecast, so they go through the engine
    together, the dates' windows one after another (R x M windows in all), ``batch_size`` windows
    per call (None: ``windows_per_call``, sized by rows for the device and its memory). The
    engine seeds each window's paths by its content, not by the batch around it, so the scores
    equal the per-date ones (``tests/eval/test_backtest_batching.py``)."""
    rows = list(rows)
    m = len(uni.names)
    jobs = [(i, k) for i in range(len(rows)) for k in range(m)]  # (rebalance index, symbol)
    stamps = [uni.timestamps[r - lookback:r] for r in rows]  # R x (L,)
    futures = [future_timestamps(ts, horizon) for ts in stamps]  # R x (H,) one per date
    options = ForecastOptions(horizon, sample_count=sample_count, seed=seed)
    scores = np.empty(len(jobs))
    batch_size = windows_per_call(predictor, lookback, horizon, sample_count, batch_size)
    bar = tqdm(total=len(jobs), desc="forecast", unit="win", disable=not progress)
    for lo in range(0, len(jobs), batch_size):
        chunk = jobs[lo:lo + batch_size]
        ctx = [uni.values[k, rows[i] - lookback:rows[i]] for i, k in chunk]  # b x (L, 6)
        res = predictor.forecast(ctx, [stamps[i] for i, _ in chunk],
                                 [futures[i] for i, _ in chunk], options,
                                 price_limits=uni.rules([k for _, k in chunk]))
        last = np.array([c[-1, CLOSE] for c in ctx], dtype=np.float64)  # (b,)
        scores[lo:lo + len(chunk)] = _scores_of(res.paths[:, :, -1, CLOSE], last, rank)
        bar.update(len(chunk))
    bar.close()
    return scores.reshape(len(rows), m)  # (R, M)


def momentum_scores(uni: Universe, row: int, window: int) -> np.ndarray:
    """Trailing return over ``window`` rows before ``row`` (M,)."""
    c = uni.closes
    return c[row - 1] / c[row - 1 - window] - 1.0


def rebalance_rows(uni: Universe, first: int, every: int, start=None, end=None) -> list[int]:
    """Rebalance rows r (the decision is taken at the close of row r - 1, stamped
    ``timestamps[r - 1]``), every ``every`` rows from ``first``, decision times within [start,
    end]."""
    ts = uni.timestamps
    lo = (
        first
        if start is None
        else max(first, int(ts.searchsorted(pd.Timestamp(start), "left")) + 1)
    )
    hi = (
        len(ts) - 1
        if end is None
        else min(len(ts) - 1, int(ts.searchsorted(pd.Timestamp(end), "right")))
    )
    return list(range(max(lo, 1), hi + 1, every))


@dataclass
class BacktestResult:
    rows: list[int]
    decisions: list[dict]  # per rebalance: time, scores, weights (model strategy)
    sims: dict[str, bt.Simulation]
    performance: dict[str, dict]
    seconds: float
    extra: dict = field(default_factory=dict)


def run_backtest(
    predictor, uni: Universe, lookback: int, horizon: int, rebalance: int, top: int,
    long_short: bool = False, cost_bps: float = 0.0, rank: str = "return", sample_count: int = 16,
    momentum_window: int | None = None, start=None, end=None, seed: int = 0,
    batch_size: int | None = None, progress: bool = True, per_date: bool = False,
) -> BacktestResult:
    """Model strategy, momentum baseline and equal-weight universe over the same rebalance rows.
    The model's scores of all dates are forecast together (``forecast_scores_all``);
    ``per_date``: one date at a time, as before issue 44 (the same scores, for comparison)."""
    mw = momentum_window or lookback
    rows = rebalance_rows(uni, max(lookback, mw + 1), rebalance, start, end)
    if not rows:
        raise ValueError(f"no rebalance date: the common calendar has {len(uni.timestamps)} rows, "
                         f"lookback {lookback} / momentum window {mw} need more")
    t0 = time.perf_counter()
    if per_date:
        all_scores = np.stack([
            forecast_scores(predictor, uni, r, lookback, horizon, sample_count, rank, seed,
                            batch_size or 512)
            for r in tqdm(rows, desc="rebalance", unit="date", disable=not progress)])  # (R, M)
    else:
        all_scores = forecast_scores_all(predictor, uni, rows, lookback, horizon, sample_count,
                                         rank, seed, batch_size, progress)  # (R, M)
    model_w, mom_w, decisions = [], [], []
    for r, s in zip(rows, all_scores):
        w = bt.target_weights(s, top, long_short)
        model_w.append(w)
        mom_w.append(bt.target_weights(momentum_scores(uni, r, mw), top, long_short))
        decisions.append(
            {
                "time": str(uni.timestamps[r - 1]), "row": r, "scores": s.tolist(),
                "weights": w.tolist(),
            }
        )
    seconds = time.perf_counter() - t0
    ew = [np.full(len(uni.names), 1.0 / len(uni.names))] * len(rows)
    prices = uni.closes
    sims = {name: bt.simulate(prices, rows, ws, cost_bps)
            for name, ws in (("model", model_w), ("momentum", mom_w), ("equal_weight", ew))}
    ppy = bt.periods_per_year(uni.timestamps)
    perf = {name: bt.performance(sim, ppy) for name, sim in sims.items()}
    for name in ("model", "momentum"):
        perf[name]["excess_annual_return"] = (
            perf[name]["annual_return"] - perf["equal_weight"]["annual_return"]
        )
    return BacktestResult(
        rows, decisions, sims, perf, seconds, {"periods_per_year": ppy, "momentum_window": mw}
    )


def markdown(perf: dict[str, dict]) -> str:
    cols = [
        ("annual_return", "ann. return", True), ("annual_volatility", "ann. vol", True),
        ("sharpe", "Sharpe", False), ("sortino", "Sortino", False),
        ("max_drawdown", "max DD", True), ("calmar", "Calmar", False),
        ("hit_rate", "hit rate", True), ("turnover", "turnover", False),
        ("excess_annual_return", "excess vs EW", True),
    ]
    lines = [
        "| strategy | " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * (len(cols) + 1),
    ]
    for name, p in perf.items():
        cells = []
        for key, _, pct in cols:
            v = p.get(key)
            cells.append(
                "—"
                if v is None or not np.isfinite(v)
                else (f"{100 * v:.2f}%" if pct else f"{v:.3f}")
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
