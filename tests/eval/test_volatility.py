"""Volatility skill: the spread's rank correlation with the realised move, the move-size ratio."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.eval.volatility import volatility_skill


def _windows(rng, n=4000, paths=64, timid=1.0):
    """Windows whose true one-step volatility varies: truth and paths drawn with the same sigma;
    the forecaster's paths are scaled by ``timid``."""
    sigma = rng.uniform(0.005, 0.05, n)  # (N,)
    last = np.full(n, 100.0)
    truth = last * (1 + sigma * rng.standard_normal(n))  # (N,)
    samples = last[:, None] * (1 + timid * sigma[:, None] * rng.standard_normal((n, paths)))
    return samples[:, :, None], truth[:, None], last, sigma


def test_a_forecaster_of_the_true_volatility_ranks_moves_and_sizes_them_right():
    rng = np.random.default_rng(3)
    samples, truth, last, _ = _windows(rng)
    v = volatility_skill(samples, truth, last)
    assert v["windows"] == 4000
    assert v["spread_rank_corr"] > 0.3
    assert v["abs_return_ratio"] == pytest.approx(1.0, abs=0.05)


def test_a_timid_forecaster_is_reported_too_small_and_a_blind_one_ranks_nothing():
    rng = np.random.default_rng(4)
    samples, truth, last, _ = _windows(rng, timid=0.5)
    ratio = volatility_skill(samples, truth, last)["abs_return_ratio"]
    assert ratio == pytest.approx(0.5, abs=0.05)
    # paths of one fixed volatility whatever the window's: no ranking skill beyond noise
    blind = last[:, None, None] * (1 + 0.02 * rng.standard_normal((len(last), 64, 1)))
    corr = volatility_skill(blind, truth, last)["spread_rank_corr"]
    assert abs(corr) < 4 / np.sqrt(len(last))


def test_a_point_forecast_has_no_volatility_skill():
    v = volatility_skill(np.ones((5, 1, 2)), np.ones((5, 2)), np.ones(5))
    assert v["spread_rank_corr"] is None and v["abs_return_ratio"] is None
