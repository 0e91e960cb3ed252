"""The cross-section's arithmetic: a planted signal's RankIC, a shuffled one's, the look-ahead
guard, and quantile returns and the top-k portfolio against hand arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kronos_core.eval import cross_section as cs
from kronos_core.eval.data import Series


def _series(closes: np.ndarray, dates: pd.DatetimeIndex, prefix: str = "S") -> list[Series]:
    """One Series per column of closes (T, M); open = high = low = close."""
    out = []
    for m in range(closes.shape[1]):
        c = closes[:, m].astype(np.float32)
        values = np.stack([c, c, c, c, np.ones_like(c), c], axis=1)  # (T, 6)
        out.append(Series(f"{prefix}{m:03d}", values, dates, "test"))
    return out


def _planted(rng, dates=200, names=200, beta=0.01, noise=0.02):
    """A universe whose next-row return is beta * z_t + noise, z_t a known N(0, 1) column: the
    signal at t is z_t. Returns the panel, the signal (T, M) and the correlation rho of signal
    and next-row return."""
    z = rng.standard_normal((dates + 1, names))
    ret = beta * z[:-1] + noise * rng.standard_normal((dates, names))  # ret[t]: row t -> t + 1
    closes = 100 * np.exp(np.vstack([np.zeros((1, names)), np.cumsum(np.log1p(ret), axis=0)]))
    stamps = pd.bdate_range("2020-01-01", periods=dates + 1)
    panel = cs.Panel.from_series(_series(closes, stamps))
    rho = beta / math.sqrt(beta ** 2 + noise ** 2)
    return panel, z, rho


def test_a_planted_signal_gives_the_rank_ic_the_arithmetic_says():
    rng = np.random.default_rng(5)
    panel, z, rho = _planted(rng, beta=0.02, noise=0.02)  # rho = 0.707
    rows = np.arange(0, len(panel.dates) - 1)
    fwd = cs.forward_returns(panel.close, rows, 1)  # (R, M)
    mask = np.ones(fwd.shape, dtype=bool)
    # Spearman of a bivariate normal with correlation rho: (6 / pi) asin(rho / 2); the simple
    # returns are log-normal in the noise, which leaves the ranks' correlation as it is
    expected = 6 / math.pi * math.asin(rho / 2)
    rank_ic, ic = cs.per_date_ic(z[rows], fwd, mask)
    stats = cs.ic_stats(rank_ic, ic)
    se = stats["rank_ic_std"] / math.sqrt(stats["dates"])
    assert stats["rank_ic"] == pytest.approx(expected, abs=3 * se)
    assert stats["rank_ic_t"] > 20 and stats["rank_ic_positive"] == 1.0
    assert stats["icir"] == pytest.approx(stats["rank_ic"] / stats["rank_ic_std"])
    # Pearson of the same: rho itself, which the RankIC must not be mistaken for
    assert stats["ic"] == pytest.approx(rho, abs=0.02)
    assert abs(stats["rank_ic"] - rho) > 6 * se


def test_a_shuffled_signal_ranks_nothing():
    rng = np.random.default_rng(6)
    panel, z, _ = _planted(rng)
    rows = np.arange(0, len(panel.dates) - 1)
    fwd = cs.forward_returns(panel.close, rows, 1)
    shuffled = rng.permuted(z[rows], axis=1)  # each date's signal given to other symbols
    stats = cs.ic_stats(*cs.per_date_ic(shuffled, fwd, np.ones(fwd.shape, dtype=bool)))
    assert abs(stats["rank_ic_t"]) < 3
    assert abs(stats["rank_ic"]) < 3 * stats["rank_ic_std"] / math.sqrt(stats["dates"])


def test_a_factor_that_reads_the_target_date_is_caught():
    rng = np.random.default_rng(7)
    panel, _, _ = _planted(rng, dates=60, names=30)
    rows = np.arange(25, 55, 5)

    def peeking(close: np.ndarray) -> np.ndarray:  # tomorrow's return, known today
        out = np.full_like(close, np.nan)
        out[:-1] = close[1:] / close[:-1] - 1.0
        return out

    with pytest.raises(cs.LookAheadError, match="peeking"):
        cs.factor_signals(panel.close, rows, functions={"peeking": peeking})
    honest = cs.factor_signals(panel.close, rows)  # the shipped factors pass the same guard
    assert set(honest) == set(cs.FACTORS)
    assert np.isfinite(honest[cs.MOMENTUM][rows]).all()


def test_partial_rank_ic_removes_what_a_factor_explains():
    rng = np.random.default_rng(8)
    n_dates, names = 80, 300
    factor = rng.standard_normal((n_dates, names))
    own = rng.standard_normal((n_dates, names))
    fwd = 0.5 * factor + 0.3 * own + rng.standard_normal((n_dates, names))
    mask = np.ones(fwd.shape, dtype=bool)
    copy = factor + 0.05 * rng.standard_normal(factor.shape)  # a signal that is the factor
    adds = factor + own  # a signal with information of its own
    assert cs._mean(cs.per_date_ic(copy, fwd, mask)[0]) > 0.3
    assert abs(cs._mean(cs.partial_rank_ic(copy, factor, fwd, mask))) < 0.05
    assert cs._t(cs.partial_rank_ic(adds, factor, fwd, mask)) > 5


def _twelve():
    """12 symbols, symbol m growing by g_m = (m - 5) / 1000 a row over 9 rows (stored as
    float32 candles, hence the relative tolerances below)."""
    growth = (np.arange(12) - 5) / 1000.0  # (M,)
    closes = 100 * (1 + growth[None, :]) ** np.arange(9)[:, None]  # (T, M)
    dates = pd.bdate_range("2021-03-01", periods=9)
    return cs.Panel.from_series(_series(closes, dates)), growth


def test_quantile_returns_and_spread_by_hand():
    panel, g = _twelve()
    rows = np.array([2, 4, 6])
    fwd = cs.forward_returns(panel.close, rows, 1)  # each symbol's own g
    signal = np.tile(np.arange(12.0), (3, 1))  # rank = symbol order
    mask = np.ones(signal.shape, dtype=bool)
    labels = cs.quantile_labels(signal, mask, 4)
    assert labels[0].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    q = cs.quantile_stats(labels, fwd, 4)
    for b in range(4):
        assert q["quantile_returns"][b] == pytest.approx(g[3 * b:3 * b + 3].mean(), rel=1e-4)
    # top minus bottom: (6 + 5 + 4) / 3000 - (-5 - 4 - 3) / 3000 = 9 / 1000
    assert q["long_short"] == pytest.approx(0.009, rel=1e-4)
    assert q["top_turnover"] == 0.0  # the same three symbols every date
    flipped = signal.copy()
    flipped[1] = -flipped[1]  # the second date ranks them the other way round
    turnover = cs.quantile_stats(cs.quantile_labels(flipped, mask, 4), fwd, 4)["top_turnover"]
    assert turnover == pytest.approx(1.0)


def test_topk_portfolio_by_hand():
    panel, g = _twelve()
    rows = np.array([2, 5])  # trades at the closes of rows 2 and 5; held to row 8
    signal = np.tile(np.arange(12.0), (2, 1))
    mask = np.ones(signal.shape, dtype=bool)
    p = cs.topk_portfolio(panel.close, rows, signal, mask, top=3, q=4, cost_bps=10.0,
                          periods_per_year=252.0)
    # 1/3 each of symbols 9, 10, 11 bought at row 2's close for one unit of turnover (10 bps);
    # weights drift with the prices, and the second rebalance trades them back to 1/3 each
    top = g[9:]
    first = 0.999 * (1 + top) ** 3  # (3,) values per third, rows 3..5
    value = first.sum() / 3
    drifted = first / first.sum()
    turn = np.abs(1 / 3 - drifted).sum()
    value *= (1 - turn * 1e-3) * ((1 + top) ** 3).mean()  # rows 6..8 at 1/3 each
    assert p["total_return"] == pytest.approx(value - 1, rel=1e-5)
    # the equal-weight universe: all 12 at 1/12, the same costs
    uni = 0.999 * (1 + g) ** 3
    u_drift = uni / uni.sum()
    u_value = uni.sum() / 12 * (1 - np.abs(1 / 12 - u_drift).sum() * 1e-3) * ((1 + g) ** 3).mean()
    assert p["universe_total_return"] == pytest.approx(u_value - 1, rel=1e-5)
    assert p["annual_excess_return"] > 0 and p["bars"] == 6


def test_per_date_rank_ic_matches_alphalens():
    al = pytest.importorskip("alphalens")
    rng = np.random.default_rng(9)
    panel, z, _ = _planted(rng, dates=40, names=50)
    rows = np.arange(0, 35, 5)
    fwd = cs.forward_returns(panel.close, rows, 1)
    ours, _ = cs.per_date_ic(z[rows], fwd, np.ones(fwd.shape, dtype=bool))
    prices = pd.DataFrame(panel.close, index=panel.dates, columns=panel.names)
    factor = pd.DataFrame(z[rows], index=panel.dates[rows], columns=panel.names).stack()
    factor.index.names = ["date", "asset"]
    data = al.utils.get_clean_factor_and_forward_returns(factor, prices, periods=(1,),
                                                         quantiles=5, max_loss=1.0)
    theirs = al.performance.factor_information_coefficient(data)["1D"]
    np.testing.assert_allclose(ours, theirs.to_numpy(), atol=1e-12)
