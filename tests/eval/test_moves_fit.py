"""Fitting the move correction (``kronos_core.eval.moves``): planted values come back."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.base.moves import KAPPA_MAX, correct_moves
from kronos_core.eval.moves import (
    LAMBDA_FLOOR,
    fit_kappa,
    fit_lambda,
    fit_moves,
    mean_abs_return,
)


def _planted(lams, kappas, n=4000, s=64, seed=0):
    """Windows whose truth is what the planted correction makes of the model's paths: the model's
    centre ``m`` moves too far (truth bears out ``lam`` of it) and its spread is off by
    ``kappa``. Returns close paths (N, S, H), truth (N, H), last (N,)."""
    rng = np.random.default_rng(seed)
    h = len(lams)
    last = rng.uniform(5, 50, n)  # (N,)
    centre = rng.normal(0, 0.02, (n, 1, h))  # (N, 1, H)
    spread = 0.01 * np.sqrt(np.arange(1, h + 1))  # (H,)
    returns = centre + spread * rng.standard_normal((n, s, h))  # (N, S, H)
    truth_ret = (np.asarray(lams) * centre[:, 0]
                 + np.asarray(kappas) * spread * rng.standard_normal((n, h)))  # (N, H)
    return last[:, None, None] * (1 + returns), last[:, None] * (1 + truth_ret), last


def test_a_planted_lambda_and_kappa_are_recovered_per_step():
    lams, kappas = [0.0, 0.4, 0.8], [1.3, 0.7, 1.0]
    paths, truth, last = _planted(lams, kappas)
    correction, fits = fit_moves(paths, truth, last)
    np.testing.assert_allclose(correction.lam, [max(v, LAMBDA_FLOOR) for v in lams], atol=0.05)
    np.testing.assert_allclose(correction.kappa, kappas, rtol=0.05)
    for f in fits:
        assert f.corrected_abs_return == pytest.approx(f.realised_abs_return, rel=1e-6)
        assert f.windows == len(last)
    # with no signal in the centre, the corrected point forecast is no worse than the last value
    assert fits[0].corrected_mae_over_last <= 1.0 + 1e-9 < fits[0].raw_mae_over_last
    # applied to whole candles as the predictor does, the moves come out the realised size
    candles = np.repeat(paths[..., None].astype(np.float32), 6, axis=-1)  # (N, S, H, 6)
    lam, kappa = correction.steps(3)
    out = correct_moves(candles, last, lam, kappa)[..., 3]  # (N, S, H)
    model = np.abs(out / last[:, None, None] - 1).mean(axis=(0, 1))  # (H,)
    realised = np.abs(truth / last[:, None] - 1).mean(axis=0)  # (H,)
    np.testing.assert_allclose(model, realised, rtol=1e-3)


def test_lambda_is_clipped_to_its_floor_and_one():
    m = np.array([0.01, -0.02, 0.03])
    assert fit_lambda(m, -m) == LAMBDA_FLOOR  # truth moves against the model: the floor, not 0
    assert fit_lambda(m, 3 * m) == 1.0  # truth moves further: never amplified
    assert fit_lambda(m, 0.5 * m) == pytest.approx(0.5)
    assert fit_lambda(np.zeros(3), m) == 1.0  # a model that never moves: nothing to shrink


def test_kappa_matches_the_target_and_stays_in_its_range():
    rng = np.random.default_rng(4)
    r = rng.normal(0.0, 0.02, (500, 32))
    target = 1.4 * mean_abs_return(r, 1.0, 1.0)
    k = fit_kappa(r, 1.0, target)
    assert mean_abs_return(r, 1.0, k) == pytest.approx(target, rel=1e-6)
    assert fit_kappa(r, 1.0, 1e-9) == 0.0  # even no spread moves more than the truth did
    assert fit_kappa(r, 1.0, 1e3) == KAPPA_MAX


def test_too_few_windows_or_paths_are_refused():
    paths, truth, last = _planted([0.5], [1.0], n=10, s=4)
    with pytest.raises(ValueError, match="2 sample paths"):
        fit_moves(paths[:, :1], truth, last)
    paths[2:, 0, 0] = np.nan
    with pytest.raises(ValueError, match="only 2 usable windows"):
        fit_moves(paths, truth, last)
