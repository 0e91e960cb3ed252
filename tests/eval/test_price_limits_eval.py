"""Evaluation and backtests forecast as the service does: a Shanghai or Shenzhen stock's paths
are held inside its daily price limit (its rule from its name and metadata), a US one's are not,
and ``price_limits=False`` leaves them as sampled."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.eval.data import Series
from kronos_core.eval.portfolio import Universe, forecast_scores_all
from kronos_core.eval.runner import cache_key
from kronos_core.eval.windows import build_windows, forecast_windows


def _series(name: str, meta: dict, seed: int, n: int = 120) -> Series:
    """Daily candles with wide random moves (so a hot tiny model steps far beyond any band)."""
    stamps = pd.bdate_range(end="2019-06-21", periods=n)
    moves = np.clip(np.random.default_rng(seed).normal(0, 0.12, n), -0.19, 0.19)
    close = 10 * np.cumprod(1 + moves)
    prev = np.concatenate([[10.0], close[:-1]])
    values = np.stack([prev, np.maximum(prev, close) * 1.01, np.minimum(prev, close) * 0.99,
                       close, np.full(n, 1e6), close * 1e6], axis=1).astype(np.float32)
    return Series(name, values, stamps, "test", meta)


def _max_step(paths: np.ndarray, last: np.ndarray) -> np.ndarray:
    """(N,) per window the largest |close / previous close - 1| over paths and steps;
    paths (N, S, H, 6), last (N,)."""
    close = paths[..., 3].astype(np.float64)  # (N, S, H)
    prev = np.concatenate([np.broadcast_to(last[:, None, None], close[:, :, :1].shape),
                           close[:, :, :-1]], axis=2)
    return np.abs(close / prev - 1).max(axis=(1, 2))


def test_windows_are_held_to_each_series_rule(predictor):
    series = [_series("600518.SH", {"special_treatment": True}, 1), _series("AAPL", {}, 2)]
    w = build_windows(series, lookback=48, horizon=4, windows=3)
    assert [r and r.board for r in w.price_limits] == ["main", None]
    kw = dict(sample_count=32, seed=0, progress=False, temperature=3.0, top_p=1.0)
    held, _ = forecast_windows(predictor, w, 4, **kw)
    free, _ = forecast_windows(predictor, w, 4, price_limits=False, **kw)
    last = w.context[:, -1, 3].astype(np.float64)
    st, us = w.series_index == 0, w.series_index == 1
    assert (_max_step(held[st], last[st]) <= 0.05 + 1e-6).all()
    assert _max_step(free[st], last[st]).max() > 0.05
    np.testing.assert_array_equal(held[us], free[us])  # no rule: as sampled
    # a paths cache never hands back the unheld paths for the held ones
    assert cache_key(None, w, 4, _Sampling(), 0) != cache_key(None, w, 4, _Sampling(), 0, False)


class _Sampling:
    sample_count, temperature, top_p = 32, 3.0, 1.0


def test_backtest_scores_come_from_held_paths(predictor):
    series = [_series("600518.SH", {"special_treatment": True}, 3), _series("600000.SH", {}, 4)]
    uni = Universe.from_series(series)
    assert [r.special_treatment for r in uni.price_limits] == [True, None]
    calls = []
    real = predictor.forecast

    def spy(*a, **kw):
        calls.append(kw.get("price_limits"))
        return real(*a, **kw)

    predictor.forecast = spy
    try:
        scores = forecast_scores_all(predictor, uni, [60, 90], 48, 3, sample_count=8)
    finally:
        del predictor.forecast
    given = [r for call in calls for r in call]
    assert [r.special_treatment for r in given] == [True, None, True, None]
    assert np.abs(scores[:, 0]).max() <= 1.05 ** 3 - 1 + 1e-6  # the ST stock's mean return
    assert np.abs(scores[:, 1]).max() <= 1.10 ** 3 - 1 + 1e-6
