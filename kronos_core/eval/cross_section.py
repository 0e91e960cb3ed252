"""The cross-section of a universe: how well a signal ranks the symbols by their coming return.

On rebalance dates (every ``every`` rows of the universe's calendar), every symbol that trades
that day and has enough history is ranked by each signal; its forward return over ``h`` rows is
``close[t + h] / close[t] - 1`` on the calendar, a suspended symbol's close carried forward (a
holder's price). Per signal and horizon:

* ``rank_ic`` / ``ic``: the mean over dates of the Spearman / Pearson correlation of the signal
  with the forward return; ``rank_ic_t`` its t statistic over dates, ``icir`` mean / std,
  ``rank_ic_positive`` the share of dates above 0;
* ``quantile_returns``: the mean forward return of each signal quantile (1 lowest; deciles by
  default), ``long_short`` the top minus the bottom quantile's return with its t over dates;
* ``top_turnover``: the share of the top quantile replaced from one date to the next;
* ``portfolio``: the top-k long-only portfolio with costs against the equal-weight universe
  (``kronos_core.eval.backtest`` arithmetic, empyrical-reloaded statistics).

The layout follows alphalens' factor data: one row per (date, asset) with the forward return
columns named by their period (``5D``), ``factor`` and ``factor_quantile``.

Every signal sees rows up to and including its date only. The factors (5-day reversal, 20-day
momentum, low 20-day volatility) are computed on the whole close panel at once, so
``check_no_lookahead`` recomputes them on the panel cut at sampled dates and refuses a factor
whose value there changes (one that reads a later row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kronos_core.base.candles import FEATURES
from kronos_core.eval.data import Series

CLOSE = FEATURES.index("close")
MIN_NAMES = 20  # fewest symbols a date must rank to count
REVERSAL = "reversal_5d"
MOMENTUM = "momentum_20d"
LOW_VOL = "low_vol_20d"
FACTORS = (REVERSAL, MOMENTUM, LOW_VOL)
FACTOR_HISTORY = 21  # closes a factor needs (20 returns)


class LookAheadError(ValueError):
    """A signal's value at a date depends on rows after that date."""


@dataclass
class Panel:
    """M symbols on the T dates of their union calendar."""

    names: list[str]
    dates: pd.DatetimeIndex  # (T,)
    close: np.ndarray  # (T, M) carried forward over a symbol's gaps; NaN before its first row
    traded: np.ndarray  # (T, M) bool: the symbol has a candle that day
    own_row: np.ndarray  # (T, M) int64: that candle's row in the symbol's series, -1 if none
    eligible_from: np.ndarray  # (M,) int64: first date row the symbol may be ranked on

    @classmethod
    def from_series(cls, series: Sequence[Series],
                    eval_from: Sequence[pd.Timestamp | None] | None = None) -> Panel:
        dates = series[0].timestamps
        for s in series[1:]:
            dates = dates.union(s.timestamps)
        dates = pd.DatetimeIndex(dates)
        t, m = len(dates), len(series)
        close = np.full((t, m), np.nan)
        own_row = np.full((t, m), -1, dtype=np.int64)
        for k, s in enumerate(series):
            at = dates.get_indexer(s.timestamps)  # (T_k,)
            close[at, k] = s.values[:, CLOSE]
            own_row[at, k] = np.arange(len(s))
        traded = own_row >= 0
        close = pd.DataFrame(close).ffill().to_numpy()
        starts = np.zeros(m, dtype=np.int64)
        for k, t0 in enumerate(eval_from or [None] * m):
            if t0 is not None:
                starts[k] = int(dates.searchsorted(pd.Timestamp(t0), "left"))
        return cls([s.name for s in series], dates, close, traded, own_row, starts)


# ---- factors: (T, M) close -> (T, M) signal, each row from rows up to it ----------------------
def reversal_5d(close: np.ndarray) -> np.ndarray:
    """Minus the 5-row return: last week's losers rank first."""
    out = np.full_like(close, np.nan)
    out[5:] = -(close[5:] / close[:-5] - 1.0)
    return out


def momentum_20d(close: np.ndarray) -> np.ndarray:
    """The 20-row return."""
    out = np.full_like(close, np.nan)
    out[20:] = close[20:] / close[:-20] - 1.0
    return out


def low_vol_20d(close: np.ndarray) -> np.ndarray:
    """Minus the standard deviation of the last 20 log returns: the calmest rank first."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logret = pd.DataFrame(np.log(close)).diff()
    return -logret.rolling(20, min_periods=20).std().to_numpy()


FACTOR_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    REVERSAL: reversal_5d, MOMENTUM: momentum_20d, LOW_VOL: low_vol_20d}


def check_no_lookahead(name: str, fn: Callable[[np.ndarray], np.ndarray], close: np.ndarray,
                       rows: Sequence[int], full: np.ndarray | None = None) -> None:
    """Raise ``LookAheadError`` when ``fn``'s value at any of ``rows`` changes once the panel is
    cut just after that row (``full``: ``fn(close)``, when already computed)."""
    full = fn(close) if full is None else full
    for r in rows:
        cut = fn(close[:r + 1])[r]
        same = np.isclose(cut, full[r], rtol=1e-9, atol=0.0, equal_nan=True)
        if not same.all():
            raise LookAheadError(
                f"signal {name!r} at row {r} changes when the rows after it are removed "
                f"({int((~same).sum())} of {len(same)} symbols): it reads the future")


def factor_signals(close: np.ndarray, rows: Sequence[int], checked: int = 3,
                   functions: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None
                   ) -> dict[str, np.ndarray]:
    """Every factor (T, M), each checked for look-ahead at ``checked`` of ``rows`` (the first,
    the middle, the last)."""
    rows = list(rows)
    sample = sorted({rows[0], rows[len(rows) // 2], rows[-1]})[:checked] if rows else []
    out = {}
    for name, fn in (functions or FACTOR_FUNCTIONS).items():
        full = fn(close)
        check_no_lookahead(name, fn, close, sample, full)
        out[name] = full
    return out


# ---- dates and forward returns ----------------------------------------------------------------
def eligible(panel: Panel, lookback: int) -> np.ndarray:
    """(T, M) bool: the symbol trades that day, has ``lookback`` candles up to it, the factors'
    history on the calendar, and the day is in its evaluation period."""
    t = np.arange(len(panel.dates))[:, None]  # (T, 1)
    enough = panel.own_row >= lookback - 1
    history = np.zeros_like(panel.traded)
    history[FACTOR_HISTORY - 1:] = np.isfinite(panel.close[:len(panel.dates) - FACTOR_HISTORY + 1])
    return panel.traded & enough & history & (t >= panel.eligible_from[None, :])


def rebalance_rows(panel: Panel, ok: np.ndarray, every: int, max_horizon: int,
                   start=None, end=None, min_names: int = MIN_NAMES) -> np.ndarray:
    """Date rows every ``every`` rows from the first with ``min_names`` eligible symbols, whose
    ``max_horizon``-row forward return is known (and within ``start`` / ``end``)."""
    if every < 1:
        raise ValueError(f"--every must be >= 1, got {every}")
    counts = ok.sum(axis=1)  # (T,)
    last = len(panel.dates) - 1 - max_horizon
    lo = int(panel.dates.searchsorted(pd.Timestamp(start))) if start is not None else 0
    if end is not None:
        last = min(last, int(panel.dates.searchsorted(pd.Timestamp(end), "left")) - 1 - max_horizon)
    first = next((r for r in range(lo, last + 1) if counts[r] >= min_names), None)
    if first is None:
        return np.zeros(0, dtype=np.int64)
    rows = np.arange(first, last + 1, every)
    return rows[counts[rows] >= min_names]


def forward_returns(close: np.ndarray, rows: np.ndarray, h: int) -> np.ndarray:
    """(R, M): close[r + h] / close[r] - 1 at each rebalance row."""
    return close[rows + h] / close[rows] - 1.0


# ---- statistics -------------------------------------------------------------------------------
def _t(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    if len(x) < 2 or x.std(ddof=1) == 0:
        return None
    return float(x.mean() / (x.std(ddof=1) / math.sqrt(len(x))))


def _mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else None


def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x)


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def per_date_ic(signal: np.ndarray, fwd: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
    """(R,) Spearman and (R,) Pearson correlation of signal and forward return on each date."""
    rank_ic, ic = np.full(len(signal), np.nan), np.full(len(signal), np.nan)
    for j in range(len(signal)):
        m = mask[j] & np.isfinite(signal[j]) & np.isfinite(fwd[j])
        if m.sum() >= 3:
            s, r = signal[j, m], fwd[j, m]
            rank_ic[j] = _corr(_ranks(s), _ranks(r))
            ic[j] = _corr(s, r)
    return rank_ic, ic


def quantile_labels(signal: np.ndarray, mask: np.ndarray, q: int) -> np.ndarray:
    """(R, M) quantile of each ranked symbol on its date, 1 (lowest signal) .. q; 0 unranked.
    Ties are broken by order (alphalens' ``rank(method='first')`` then equal-count bins)."""
    out = np.zeros(signal.shape, dtype=np.int64)
    for j in range(len(signal)):
        m = np.flatnonzero(mask[j] & np.isfinite(signal[j]))
        if len(m) < q:
            continue
        order = m[np.argsort(signal[j, m], kind="stable")]
        out[j, order] = np.arange(len(order)) * q // len(order) + 1
    return out


def quantile_stats(labels: np.ndarray, fwd: np.ndarray, q: int) -> dict:
    """Mean forward return per quantile (averaged over dates), top minus bottom with its t, and
    the top quantile's turnover."""
    per_date = np.full((len(labels), q), np.nan)  # (R, q)
    for j in range(len(labels)):
        for b in range(1, q + 1):
            sel = (labels[j] == b) & np.isfinite(fwd[j])
            if sel.any():
                per_date[j, b - 1] = fwd[j, sel].mean()
    spread = per_date[:, -1] - per_date[:, 0]  # (R,)
    turnover = []
    for j in range(1, len(labels)):
        now, before = set(np.flatnonzero(labels[j] == q)), set(np.flatnonzero(labels[j - 1] == q))
        if now:
            turnover.append(1.0 - len(now & before) / len(now))
    with np.errstate(invalid="ignore"):
        means = np.nanmean(per_date, axis=0) if len(per_date) else np.full(q, np.nan)
    return {"quantile_returns": [float(v) if np.isfinite(v) else None for v in means],
            "long_short": _mean(spread), "long_short_t": _t(spread),
            "top_turnover": float(np.mean(turnover)) if turnover else None,
            "_long_short_by_date": spread}


def ic_stats(rank_ic: np.ndarray, ic: np.ndarray) -> dict:
    ok = rank_ic[np.isfinite(rank_ic)]
    sd = float(ok.std(ddof=1)) if len(ok) > 1 else None
    return {"dates": int(len(ok)), "rank_ic": _mean(rank_ic), "rank_ic_t": _t(rank_ic),
            "rank_ic_std": sd,
            "icir": (float(ok.mean()) / sd) if sd else None,
            "rank_ic_positive": float((ok > 0).mean()) if len(ok) else None,
            "ic": _mean(ic), "ic_t": _t(ic)}


def partial_rank_ic(signal: np.ndarray, factor: np.ndarray, fwd: np.ndarray,
                    mask: np.ndarray) -> np.ndarray:
    """(R,) per date: the Spearman correlation of signal and forward return with the factor's
    ranks partialled out of both, (r_sy - r_sf r_fy) / sqrt((1 - r_sf^2)(1 - r_fy^2))."""
    out = np.full(len(signal), np.nan)
    for j in range(len(signal)):
        m = mask[j] & np.isfinite(signal[j]) & np.isfinite(fwd[j]) & np.isfinite(factor[j])
        if m.sum() < 4:
            continue
        s, f, y = _ranks(signal[j, m]), _ranks(factor[j, m]), _ranks(fwd[j, m])
        r_sy, r_sf, r_fy = _corr(s, y), _corr(s, f), _corr(f, y)
        den = math.sqrt(max((1 - r_sf ** 2) * (1 - r_fy ** 2), 0.0))
        out[j] = (r_sy - r_sf * r_fy) / den if den > 0 else np.nan
    return out


def mean_rank_corr(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float | None:
    """The mean over dates of the Spearman correlation of two signals."""
    vals, _ = per_date_ic(a, b, mask)
    return _mean(vals)


def topk_portfolio(close: np.ndarray, rows: np.ndarray, signal: np.ndarray, mask: np.ndarray,
                   top: int | None, q: int, cost_bps: float, periods_per_year: float) -> dict:
    """The top-k long-only portfolio (k = ``top``, else the top quantile's size on each date)
    against the equal-weight universe of the same dates: each holds from a date's close to the
    next rebalance's (``kronos_core.eval.backtest.simulate``), with ``cost_bps`` per unit of
    turnover. Annualised return, excess return, information ratio and drawdowns from
    empyrical-reloaded."""
    import empyrical as ep

    from kronos_core.eval import backtest as bt

    prices = np.where(np.isfinite(close), close, 1.0)  # never held before a symbol's first row
    weights, universe = [], []
    for j in range(len(rows)):
        s = np.where(mask[j], signal[j], np.nan)
        n = int(np.isfinite(s).sum())
        k = top or max(1, n // q)
        weights.append(bt.target_weights(s, k))
        universe.append(bt.target_weights(np.where(mask[j], 1.0, np.nan), n))
    trade_rows = rows + 1  # a decision at row t trades at its close: returns from row t + 1 on
    port = bt.simulate(prices, trade_rows, weights, cost_bps)
    uni = bt.simulate(prices, trade_rows, universe, cost_bps)
    p, u = pd.Series(port.returns), pd.Series(uni.returns)
    active = p - u
    return {
        "top_k": top or f"top 1/{q} of each date",
        "cost_bps": cost_bps,
        "bars": int(len(p)),
        "total_return": float(port.equity[-1] - 1.0),
        "universe_total_return": float(uni.equity[-1] - 1.0),
        "annual_return": float(ep.annual_return(p, annualization=periods_per_year)),
        "universe_annual_return": float(ep.annual_return(u, annualization=periods_per_year)),
        "annual_excess_return": float(ep.annual_return(p, annualization=periods_per_year)
                                      - ep.annual_return(u, annualization=periods_per_year)),
        "information_ratio": float(ep.excess_sharpe(p, u) * math.sqrt(periods_per_year)),
        "max_drawdown": float(ep.max_drawdown(p)),
        "excess_max_drawdown": float(ep.max_drawdown(active)),
        "turnover": float(port.turnover.mean()) if len(port.turnover) else 0.0,
    }
