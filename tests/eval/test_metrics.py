"""Every metric against values worked out by hand on small arrays."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from kronos_core.eval import metrics as m
from kronos_core.eval.scoring import score


def test_point_errors_by_hand():
    point = np.array([[1.0, 2.0], [3.0, 5.0]])
    truth = np.array([[2.0, 2.0], [1.0, 4.0]])
    assert m.abs_errors(point, truth).mean() == pytest.approx((1 + 0 + 2 + 1) / 4)
    assert np.sqrt(m.squared_errors(point, truth).mean()) == pytest.approx(
        np.sqrt((1 + 0 + 4 + 1) / 4)
    )
    assert m.ape(point, truth).mean() == pytest.approx((50 + 0 + 200 + 25) / 4)


def test_mase_by_hand():
    history = np.array([[1.0, 3.0, 2.0, 4.0]])  # naive errors 2, 1, 2 -> scale 5/3
    assert m.mase_scale(history)[0] == pytest.approx(5 / 3)
    assert m.mase_scale(history, season=2)[0] == pytest.approx((1 + 1) / 2)
    point, truth = np.array([[4.0, 4.0]]), np.array([[5.0, 6.0]])  # errors 1, 2
    assert m.scaled_errors(point, truth, m.mase_scale(history)).mean() == pytest.approx(
        1.5 / (5 / 3)
    )


def test_direction_hits_with_ties():
    last = np.array([10.0, 10.0, 10.0, 10.0])
    point = np.array([[11.0], [9.0], [10.0], [12.0]])
    truth = np.array([[12.0], [11.0], [8.0], [10.0]])
    np.testing.assert_allclose(m.direction_hits(point, truth, last), [1.0, 0.0, 0.5, 0.5])


def test_crps_point_forecast_is_absolute_error():
    samples = np.array([[[3.0, 1.0]]])  # (N=1, S=1, H=2)
    truth = np.array([[5.0, 0.0]])
    np.testing.assert_allclose(m.crps_elements(samples, truth), [[2.0, 1.0]])


def test_crps_two_samples_by_hand():
    samples, y = np.array([[[0.0], [2.0]]]), np.array([[1.0]])
    # plug-in: X uniform on {0, 2}: E|X - y| = 1, E|X - X'| = (0 + 2 + 2 + 0) / 4 = 1 -> 0.5
    assert m.crps_elements(samples, y, m.PLUG_IN)[0, 0] == pytest.approx(0.5)
    # fair: the pairs of distinct draws only, E|X - X'| = (2 + 2) / 2 = 2 -> 1 - 1 = 0
    assert m.crps_elements(samples, y)[0, 0] == pytest.approx(0.0)


def test_fair_crps_does_not_depend_on_the_number_of_paths_and_plug_in_does():
    # Truths and paths from the same N(0, 1): the CRPS of that distribution averages
    # E|X - Y| - E|X - X'| / 2 = 2 / sqrt(pi) - 1 / sqrt(pi) = 1 / sqrt(pi) over the truths.
    # The fair estimate is the same from 8, 32 or 512 paths; the plug-in one adds
    # E|X - X'| / (2 S) = 1 / (S sqrt(pi)), 12.5% of the score with 8 paths.
    rng = np.random.default_rng(11)
    n = 20_000
    truth = rng.standard_normal((n, 1))
    expected = 1 / np.sqrt(np.pi)
    for paths in (8, 32, 512):
        samples = rng.standard_normal((n, paths, 1))
        fair = m.crps_elements(samples, truth)[:, 0]
        tolerance = 4 * fair.std() / np.sqrt(n)
        assert abs(fair.mean() - expected) < tolerance, paths
        plug_in = m.crps_elements(samples, truth, m.PLUG_IN)[:, 0].mean()
        excess = 1 / (paths * np.sqrt(np.pi))
        assert plug_in - fair.mean() == pytest.approx(excess, rel=0.1), paths
        if paths == 8:
            assert abs(plug_in - expected) > 4 * tolerance


def test_unknown_crps_estimator_is_refused():
    with pytest.raises(ValueError, match="estimator"):
        m.crps_elements(np.zeros((1, 2, 1)), np.zeros((1, 1)), "nrg")


@pytest.mark.parametrize("y", [0.0, 0.7, -2.0])
def test_crps_matches_normal_closed_form(y):
    # CRPS(N(mu, s^2), y) = s * (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi)), z = (y - mu) / s
    mu, s, n = 0.3, 1.7, 4000
    nd = NormalDist()
    samples = np.array([mu + s * nd.inv_cdf((k + 0.5) / n) for k in range(n)])[None, :, None]
    z = (y - mu) / s
    closed = s * (z * (2 * nd.cdf(z) - 1) + 2 * nd.pdf(z) - 1 / np.sqrt(np.pi))
    # a stratified quantile grid is the distribution itself: the plug-in estimator
    assert m.crps_elements(samples, np.array([[y]]), m.PLUG_IN)[0, 0] == pytest.approx(
        closed, rel=2e-3)


def test_pinball_by_hand():
    q = np.array([[2.0, 2.0]])
    truth = np.array([[3.0, 0.0]])
    # level 0.9: y above q -> 0.9 * 1; y below q -> 0.1 * 2
    np.testing.assert_allclose(m.pinball_elements(q, truth, 0.9), [[0.9, 0.2]])
    np.testing.assert_allclose(m.pinball_elements(q, truth, 0.5), [[0.5, 1.0]])


def test_coverage_by_hand():
    lower = np.array([[0.0, 0.0, 0.0, 0.0]])
    upper = np.array([[1.0, 1.0, 1.0, 1.0]])
    truth = np.array([[0.5, 1.0, 1.5, -0.1]])
    assert m.covered(lower, upper, truth).mean() == pytest.approx(0.5)
    assert m.central_levels([0.8]) == [(0.8, 0.1, 0.9)]


def test_pit_and_histogram():
    samples = np.array([[[1.0], [2.0], [3.0], [4.0]]])
    assert m.pit_values(samples, np.array([[2.5]]))[0, 0] == pytest.approx(0.5)
    assert m.pit_values(samples, np.array([[2.0]]))[0, 0] == pytest.approx(0.125 + 0.25)
    hist = m.pit_histogram(np.array([0.05, 0.15, 0.95, 1.0]), bins=10)
    assert hist["counts"][0] == 1 and hist["counts"][1] == 1 and hist["counts"][9] == 2
    assert sum(hist["density"]) == pytest.approx(10.0)


def test_brier_and_reliability_by_hand():
    last = np.array([1.0, 1.0, 1.0, 1.0])
    # (4, 2, 1)
    samples = np.array([[[2.0], [0.0]], [[2.0], [2.0]], [[0.0], [0.0]], [[1.0], [2.0]]])
    p = m.prob_up(samples, last)
    np.testing.assert_allclose(p, [0.5, 1.0, 0.0, 0.75])
    truth = np.array([[2.0], [0.5], [0.5], [3.0]])
    outcome = m.up_outcomes(truth, last)
    np.testing.assert_allclose(outcome, [1, 0, 0, 1])
    assert m.brier_elements(p, outcome).mean() == pytest.approx((0.25 + 1 + 0 + 0.0625) / 4)
    table = {tuple(r["bin"]): r for r in m.reliability_table(p, outcome, bins=2)}
    assert table[(0.0, 0.5)]["count"] == 1 and table[(0.0, 0.5)]["observed"] == 0.0
    assert table[(0.5, 1.0)]["count"] == 3
    assert table[(0.5, 1.0)]["mean_forecast"] == pytest.approx(0.75)
    assert table[(0.5, 1.0)]["observed"] == pytest.approx(2 / 3)


def test_score_card_is_consistent():
    rng = np.random.default_rng(0)
    n, s, h = 50, 64, 3
    samples = rng.normal(size=(n, s, h))
    truth = rng.normal(size=(n, h))
    history = rng.normal(size=(n, 30)).cumsum(axis=1)
    card = score(samples, samples.mean(axis=1), truth, np.zeros(n), history, quantiles=(0.1, 0.9),
                 coverage=(0.8,))
    # same-distribution samples: the 80% interval covers roughly 80% of the truths
    assert 0.65 < card["coverage"]["0.8"] < 0.95
    assert len(card["per_step"]["mae"]) == h
    assert card["mae"] == pytest.approx(np.mean(card["per_step"]["mae"]))
    assert set(card["pinball"]) == {"0.1", "0.9"}


def test_score_card_keeps_close_quantile_levels_apart():
    """Two levels that agree to six digits are two pinball entries (``f"{q:g}"`` merged them)."""
    rng = np.random.default_rng(1)
    samples, truth = rng.normal(size=(20, 16, 2)), rng.normal(size=(20, 2))
    card = score(
        samples, samples.mean(axis=1), truth, np.zeros(20),
        rng.normal(size=(20, 10)).cumsum(axis=1), quantiles=(0.1234567, 0.1234568), coverage=(0.8,),
    )
    assert set(card["pinball"]) == {"0.1234567", "0.1234568"}
