"""The move correction's arithmetic (``kronos_core.base.moves``) on hand-made paths, and its
``kronos.json`` block."""

from __future__ import annotations

import numpy as np
import pytest

from kronos_core.base.moves import MIN_GROSS, MoveCorrection, correct_moves, move_report


def _paths(seed: int = 0, b: int = 3, s: int = 40, h: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(B, S, H, 6) candles around a drifting close, and the last closes (B,)."""
    rng = np.random.default_rng(seed)
    last = np.array([10.0, 55.0, 3.2])[:b]
    close = last[:, None, None] * (1 + 0.01 + rng.normal(0, 0.03, (b, s, h)))  # (B, S, H)
    out = np.empty((b, s, h, 6), np.float32)
    out[..., 0] = close * 0.995
    out[..., 1] = close * 1.02
    out[..., 2] = close * 0.97
    out[..., 3] = close
    out[..., 4] = rng.uniform(100, 200, (b, s, h))
    out[..., 5] = rng.uniform(1e3, 2e3, (b, s, h))
    return out, last


def _returns(paths, last):
    return paths[..., 3].astype(np.float64) / last[:, None, None] - 1  # (B, S, H)


def test_lambda_one_kappa_one_is_the_identity_bit_for_bit():
    paths, last = _paths()
    out = correct_moves(paths, last, np.ones(4), np.ones(4))
    assert out.dtype == paths.dtype
    np.testing.assert_array_equal(out, paths)
    # a step with (1, 1) beside corrected ones is left exactly as sampled too
    mixed = correct_moves(paths, last, np.array([0.5, 1.0, 0.0, 1.0]),
                          np.array([1.0, 1.0, 2.0, 1.0]))
    np.testing.assert_array_equal(mixed[:, :, [1, 3]], paths[:, :, [1, 3]])
    assert not np.array_equal(mixed[:, :, 0], paths[:, :, 0])


def test_lambda_zero_centres_the_paths_on_the_last_value():
    paths, last = _paths()
    before = _returns(paths, last).mean(axis=1)  # (B, H)
    assert np.abs(before).min() > 1e-3  # the sampled centre moved
    out = correct_moves(paths, last, np.zeros(4), np.ones(4))
    centre = _returns(out, last).mean(axis=1)  # (B, H)
    np.testing.assert_allclose(centre, 0.0, atol=1e-6)
    # the spread about the centre is kept (kappa 1)
    np.testing.assert_allclose(_returns(out, last).std(axis=1), _returns(paths, last).std(axis=1),
                               rtol=1e-5)


def test_kappa_scales_the_spread_exactly_and_lambda_scales_the_centre():
    paths, last = _paths(1)
    r = _returns(paths, last)
    out = correct_moves(paths, last, np.full(4, 0.3), np.array([2.0, 0.5, 1.5, 0.0]))
    r2 = _returns(out, last)
    np.testing.assert_allclose(r2.mean(axis=1), 0.3 * r.mean(axis=1), rtol=1e-5, atol=1e-7)
    spread, spread2 = r.std(axis=1), r2.std(axis=1)  # (B, H)
    np.testing.assert_allclose(spread2 / spread, np.broadcast_to([2.0, 0.5, 1.5, 0.0], (3, 4)),
                               rtol=1e-5, atol=1e-6)


def test_each_candle_is_scaled_with_its_close_and_volume_is_kept():
    paths, last = _paths(2)
    out = correct_moves(paths, last, np.full(4, 0.2), np.full(4, 1.7))
    factor = out[..., 3].astype(np.float64) / paths[..., 3]  # (B, S, H)
    for k in (0, 1, 2):  # open, high, low keep their ratio to the close
        np.testing.assert_allclose(out[..., k] / paths[..., k], factor, rtol=1e-5)
    np.testing.assert_array_equal(out[..., 4:], paths[..., 4:])


def test_a_corrected_close_never_falls_to_zero_and_a_bad_one_is_left_alone():
    paths, last = _paths(3)
    paths[0, 0, 0, 3] = -1.0  # a sampled close below zero: no ratio to scale by
    paths[1, 0, 0, 3] = 0.5 * last[1]  # -50%: ten times that spread would cross zero
    out = correct_moves(paths, last, np.full(4, 1.0), np.full(4, 10.0))  # a wild spread
    ok = paths[..., 3] > 0  # (B, S, H)
    floor = MIN_GROSS * last[:, None, None]  # (B, 1, 1)
    assert (out[..., 3] >= floor * (1 - 1e-6))[ok].all()
    assert out[1, 0, 0, 3] == pytest.approx(MIN_GROSS * last[1], rel=1e-5)
    np.testing.assert_array_equal(out[0, 0, 0], paths[0, 0, 0])


def test_steps_past_the_fitted_ones_take_the_last_and_the_block_is_checked():
    mc = MoveCorrection.from_manifest({"lambda": [0.1, 0.2], "kappa": [1.3, 1.1], "windows": 9,
                                       "where": "before eval_from"}, "m/kronos.json")
    assert mc is not None
    lam, kappa = mc.steps(4)
    np.testing.assert_array_equal(lam, [0.1, 0.2, 0.2, 0.2])
    np.testing.assert_array_equal(kappa, [1.3, 1.1, 1.1, 1.1])
    assert mc.as_dict()["windows"] == 9 and mc.as_dict()["fitted_on"] == "before eval_from"
    assert move_report(mc.as_dict(), 3, False) == {
        "applied": False, "lambda": [0.1, 0.2, 0.2], "kappa": [1.3, 1.1, 1.1],
        "source": "m/kronos.json"}
    assert move_report(None, 3, True) is None
    assert MoveCorrection.from_manifest(None, "x") is None
    assert MoveCorrection((1.0,), (1.0,)).is_identity(5)
    for bad, words in (({"lambda": [1.2], "kappa": [1.0]}, "lambda"),
                       ({"lambda": [0.5], "kappa": [-1.0]}, "kappa"),
                       ({"lambda": [0.5, 0.4], "kappa": [1.0]}, "one value per step"),
                       ({"lambda": [0.5]}, "missing 'kappa'"),
                       ({"lambda": 0.5, "kappa": 1.0}, "lists"),
                       ([0.5], "must be an object")):
        with pytest.raises(ValueError, match=words) as err:
            MoveCorrection.from_manifest(bad, "m/kronos.json")
        assert "m/kronos.json" in str(err.value)
