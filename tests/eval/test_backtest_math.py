"""Backtest arithmetic by hand: weights, equity with costs, Sharpe, Sortino, drawdown."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.eval import backtest as bt


def test_target_weights():
    s = np.array([0.1, np.nan, 0.3, -0.2, 0.0])
    np.testing.assert_allclose(bt.target_weights(s, 2), [0.5, 0, 0.5, 0, 0])
    np.testing.assert_allclose(bt.target_weights(s, 1, long_short=True), [0, 0, 1, -1, 0])


def test_max_drawdown_by_hand():
    assert bt.max_drawdown([1.0, 1.2, 0.9, 1.5, 1.2]) == pytest.approx(0.25)
    np.testing.assert_allclose(bt.drawdown_curve([1.0, 2.0, 1.0]), [0, 0, -0.5])


def test_sharpe_and_sortino_by_hand():
    r = np.array([0.01, -0.02, 0.03, 0.0])
    mean, sd = r.mean(), r.std(ddof=1)
    assert bt.sharpe(r, 252) == pytest.approx(mean / sd * np.sqrt(252))
    down = np.sqrt((0.02**2) / 4)
    assert bt.sortino(r, 252) == pytest.approx(mean / down * np.sqrt(252))


def test_simulate_by_hand_with_costs():
    # two assets; rebalance at rows 1 and 3; hold asset 0, then asset 1
    prices = np.array([[10, 20], [11, 20], [12, 22], [12, 24], [12, 30]], dtype=float)
    sim = bt.simulate(prices, [1, 3], [np.array([1.0, 0.0]), np.array([0.0, 1.0])], cost_bps=100)
    # period 1: turnover 1 -> equity 0.99, then x 11/10, x 12/10
    e1 = 0.99 * 1.1
    e2 = 0.99 * 1.2
    # period 2: turnover |0-1| + |1-0| = 2 -> x (1 - 0.02); rows 3, 4 of asset 1 vs row 2 (22)
    e3 = e2 * 0.98 * 24 / 22
    e4 = e2 * 0.98 * 30 / 22
    np.testing.assert_allclose(sim.equity, [1.0, e1, e2, e3, e4])
    np.testing.assert_allclose(sim.turnover, [1.0, 2.0])
    np.testing.assert_allclose(sim.period_returns, [e2 - 1, e4 / e2 - 1])
    np.testing.assert_allclose(sim.returns, np.diff(sim.equity) / sim.equity[:-1])
    perf = bt.performance(sim, 252)
    assert perf["total_return"] == pytest.approx(e4 - 1)
    assert perf["annual_return"] == pytest.approx(e4 ** (252 / 4) - 1)
    assert perf["hit_rate"] == pytest.approx(1.0)
    assert perf["max_drawdown"] == pytest.approx(0.0)


def test_drifted_weights_give_turnover():
    prices = np.array([[10, 10], [10, 10], [20, 10], [20, 10]], dtype=float)
    w = np.array([0.5, 0.5])
    sim = bt.simulate(prices, [1, 2, 3], [w, w, w])
    # after row 2 asset 0 doubled: drifted weights (2/3, 1/3) -> back to 1/2: turnover 1/3
    np.testing.assert_allclose(sim.turnover, [1.0, 0.0, 1 / 3])


def test_long_short_equity():
    prices = np.array([[10, 10], [11, 9]], dtype=float)
    sim = bt.simulate(prices, [1], [np.array([1.0, -1.0])])
    assert sim.equity[-1] == pytest.approx(1 + 0.1 + 0.1)


def test_periods_per_year():
    import pandas as pd

    assert bt.periods_per_year(pd.bdate_range("2024-01-01", periods=30)) == 252
    assert bt.periods_per_year(pd.date_range("2024-01-01", periods=48 * 3, freq="h")) == 252 * 24
