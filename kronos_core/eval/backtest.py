"""Walk-forward portfolio backtest arithmetic: weights, equity curve with costs, performance.

Timing convention: a decision for rebalance row ``r`` sees rows ``< r`` only (the
forecast's context ends at the close of row ``r - 1``) and trades at that close;
the new weights earn the returns of rows ``r, r + 1, ...`` until the next
rebalance. Weights drift with prices between rebalances; at each rebalance the
turnover is sum |w_new - w_drifted| and costs of ``cost_bps`` basis points per
unit of turnover are taken from equity.

Long-only holds the top k at 1/k each; long-short adds the bottom k at -1/k each
(one unit long and one unit short per unit of equity).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def target_weights(scores: np.ndarray, k: int, long_short: bool = False) -> np.ndarray:
    """Weights (M,) from scores (M,): top k at +1/k, with ``long_short`` the bottom k at -1/k.

    NaN scores (symbols that could not be forecast) are never held. Ties keep the
    earlier symbol (stable sort), so decisions are deterministic.
    """
    s = np.asarray(scores, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(s))
    w = np.zeros(len(s))
    if k < 1 or len(ok) == 0:
        return w
    order = ok[np.argsort(-s[ok], kind="stable")]  # best first
    k_long = min(k, len(order) // 2 if long_short else len(order))
    if k_long == 0:
        return w
    w[order[:k_long]] = 1.0 / k_long
    if long_short:
        w[order[::-1][:k_long]] = -1.0 / k_long
    return w


@dataclass
class Simulation:
    """Result of ``simulate``: one entry per bar from the first rebalance's trade on."""

    equity: np.ndarray  # (n + 1,) equity, starting at 1.0 at the first trade
    returns: np.ndarray  # (n,) per-bar returns, net of costs
    period_returns: np.ndarray  # (P,) return of each holding period, net of costs
    turnover: np.ndarray  # (P,) sum |w_new - w_drifted| at each rebalance
    rows: np.ndarray  # (n,) the price row of each return
    weights: list[np.ndarray] = field(default_factory=list)  # (P,) target weights (M,)


def simulate(prices: np.ndarray, rebalance_rows, weights, cost_bps: float = 0.0) -> Simulation:
    """Equity curve of holding ``weights[j]`` from ``rebalance_rows[j]`` to the next rebalance.

    prices (T, M) positive closes on a common calendar; rebalance_rows increasing,
    each >= 1; the last period runs to the end of ``prices`` or to the next period's
    length, whichever comes first.
    """
    prices = np.asarray(prices, dtype=np.float64)
    rows = [int(r) for r in rebalance_rows]
    if (
        not rows
        or rows[0] < 1
        or any(b <= a for a, b in zip(rows, rows[1:]))
        or rows[-1] >= len(prices)
    ):
        raise ValueError(
            f"rebalance rows must increase within [1, {len(prices) - 1}], got {rows[:5]}..."
        )
    last_len = rows[-1] - rows[-2] if len(rows) > 1 else len(prices) - rows[-1]
    ends = rows[1:] + [min(len(prices), rows[-1] + last_len)]
    equity: list[float] = [1.0]
    rets: list[float] = []
    per_ret: list[float] = []
    turns: list[float] = []
    out_rows: list[int] = []
    held = np.zeros(prices.shape[1])
    for r, end, w in zip(rows, ends, weights):
        w = np.asarray(w, dtype=np.float64)
        turn = float(np.abs(w - held).sum())
        start = equity[-1] * (1.0 - turn * cost_bps / 1e4)
        growth = prices[r:end] / prices[r - 1]  # (len, M)
        value = start * (1.0 + (growth - 1.0) @ w)  # (len,)
        path = np.concatenate([[equity[-1]], value])
        rets.extend(path[1:] / path[:-1] - 1.0)
        equity.extend(value)
        out_rows.extend(range(r, end))
        per_ret.append(value[-1] / path[0] - 1.0)
        turns.append(turn)
        g = 1.0 + (growth[-1] - 1.0) @ w
        held = w * growth[-1] / g if g > 0 else np.zeros_like(w)
    return Simulation(np.array(equity), np.array(rets), np.array(per_ret), np.array(turns),
                      np.array(out_rows), [np.asarray(w, dtype=np.float64) for w in weights])


def max_drawdown(equity) -> float:
    """Largest fall from a running peak, as a fraction of the peak (0.25 = -25%)."""
    e = np.asarray(equity, dtype=np.float64)
    peak = np.maximum.accumulate(e)
    return float(np.max(1.0 - e / peak)) if e.size else 0.0


def drawdown_curve(equity) -> np.ndarray:
    e = np.asarray(equity, dtype=np.float64)
    return e / np.maximum.accumulate(e) - 1.0


def sharpe(returns, periods_per_year: float) -> float:
    """Annualised Sharpe ratio, zero risk-free rate: mean / std (ddof 1) * sqrt(periods)."""
    r = np.asarray(returns, dtype=np.float64)
    sd = r.std(ddof=1) if r.size > 1 else 0.0
    return float(r.mean() / sd * np.sqrt(periods_per_year)) if sd > 0 else float("nan")


def sortino(returns, periods_per_year: float) -> float:
    """Annualised Sortino ratio: mean / sqrt(mean(min(r, 0)^2)) * sqrt(periods)."""
    r = np.asarray(returns, dtype=np.float64)
    down = np.sqrt(np.mean(np.minimum(r, 0.0) ** 2)) if r.size else 0.0
    return float(r.mean() / down * np.sqrt(periods_per_year)) if down > 0 else float("nan")


def performance(sim: Simulation, periods_per_year: float) -> dict:
    """Annualised return, volatility, Sharpe, Sortino, max drawdown, Calmar, hit rate, turnover."""
    n = len(sim.returns)
    total = float(sim.equity[-1] / sim.equity[0])
    ann = total ** (periods_per_year / n) - 1.0 if n and total > 0 else float("nan")
    mdd = max_drawdown(sim.equity)
    per_year_rebalances = len(sim.turnover) * periods_per_year / n if n else float("nan")
    return {
        "total_return": total - 1.0,
        "annual_return": ann,
        "annual_volatility": float(sim.returns.std(ddof=1) * np.sqrt(periods_per_year))
        if n > 1
        else float("nan"),
        "sharpe": sharpe(sim.returns, periods_per_year),
        "sortino": sortino(sim.returns, periods_per_year),
        "max_drawdown": mdd,
        "calmar": float(ann / mdd) if mdd > 0 else float("nan"),
        "hit_rate": float((sim.period_returns > 0).mean())
        if len(sim.period_returns)
        else float("nan"),
        "turnover": float(sim.turnover.mean()) if len(sim.turnover) else 0.0,
        "annual_turnover": float(sim.turnover.mean() * per_year_rebalances)
        if len(sim.turnover)
        else 0.0,
        "bars": n,
        "rebalances": len(sim.turnover),
    }


def periods_per_year(timestamps) -> float:
    """Bars per year from the stamps: 252 trading days for daily data, 252 x bars per day
    for intraday data, 52 for weekly, 12 for monthly."""
    import pandas as pd

    ts = pd.DatetimeIndex(timestamps)
    step = pd.Series(ts[1:] - ts[:-1]).median()
    if step >= pd.Timedelta(days=25):
        return 12.0
    if step >= pd.Timedelta(days=5):
        return 52.0
    if step >= pd.Timedelta(hours=20):
        return 252.0
    bars_per_day = float(pd.Series(ts.normalize()).value_counts().median())
    return 252.0 * bars_per_day
