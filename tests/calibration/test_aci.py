"""Adaptive conformal inference and the nested method selection: walks by hand, delayed
feedback, no look-ahead, the long-run coverage under a shift, files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from eval_helpers import damage_after

from kronos_core.calibration import aci
from kronos_core.calibration.conformal import Calibration, CalibrationError, conformity_scores
from kronos_core.eval.data import Series
from kronos_core.eval.runner import WalkForward, window_times
from kronos_core.eval.windows import build_windows

MODEL = {"name": "m", "sha256": "a" * 64}


def test_conformal_corrections_by_hand():
    s = np.arange(9.0, 0.0, -1.0)  # 9 scores, unsorted: ranks of 1..9
    assert aci.conformal_corrections(s, np.array(0.8)) == 8.0  # ceil(10 * 0.8) = 8th smallest
    assert aci.conformal_corrections(s, np.array(0.5)) == 5.0
    # rank 10 > 9: clipped to the largest
    assert aci.conformal_corrections(s, np.array(0.99)) == 9.0
    assert aci.conformal_corrections(s, np.array(-0.1)) == 1.0  # rank <= 0: the smallest
    two = np.stack([s, 10 * s], axis=1)  # (9, 2): elementwise levels
    np.testing.assert_array_equal(aci.conformal_corrections(two, np.array([0.5, 0.8])), [5.0, 80.0])


def _state(gamma=0.1):
    # W = 3, one level
    return aci.initial_state(np.array([1.0, 2.0, 3.0]).reshape(3, 1, 1, 1), [0.5], gamma)


def test_walk_by_hand_immediate_feedback():
    scores = np.array([5.0, 0.5, 4.0]).reshape(3, 1, 1, 1)
    issued = np.array([0, 1, 2])
    corr, st = aci.walk(_state(), scores, issued, issued + 0.5, flush=False)
    # w0: a = 0.5, rank ceil(4 * 0.5) = 2 of [1, 2, 3] -> 2; score 5 > 2: miss
    # w1: a = 0.5 + 0.1 (0.5 - 1) = 0.45, rank ceil(4 * 0.55) = 3 of [2, 3, 5] -> 5; 0.5 <= 5:
    # covered
    # w2: a = 0.45 + 0.1 * 0.5 = 0.5, rank 2 of [3, 5, 0.5] -> 3
    np.testing.assert_allclose(corr.ravel(), [2.0, 5.0, 3.0])
    assert st.alpha.item() == pytest.approx(0.5) and st.scores.ravel().tolist() == [3.0, 5.0, 0.5]
    _, flushed = aci.walk(_state(), scores, issued, issued + 0.5)  # w2 (4 > 3, a miss) taken in too
    assert flushed.alpha.item() == pytest.approx(0.45) and flushed.scores.ravel().tolist() == [
        5.0, 0.5, 4.0,
    ]


def test_walk_waits_for_the_truth():
    scores = np.array([5.0, 0.5, 4.0]).reshape(3, 1, 1, 1)
    issued = np.array([0, 1, 2])
    corr, _ = aci.walk(_state(), scores, issued, issued + 1.5, flush=False)
    # w1 is issued before w0's truth ends (1.5 > 1): same state as w0; w2 sees w0 only
    np.testing.assert_allclose(corr.ravel(), [2.0, 2.0, 5.0])
    with pytest.raises(ValueError, match="ascending"):
        aci.walk(_state(), scores, issued[::-1], issued[::-1])


def test_correction_depends_only_on_resolved_windows():
    rng = np.random.default_rng(0)
    n = 60
    scores = rng.normal(size=(n, 2, 3, 1))
    issued = np.sort(rng.uniform(0, 100, n))
    resolved = issued + rng.uniform(0, 10, n)
    st = aci.initial_state(rng.normal(size=(20, 2, 3, 1)), [0.5, 0.8], 0.05)
    corr, _ = aci.walk(st, scores, issued, resolved, flush=False)
    for i in range(0, n, 7):
        # truths not yet complete when window i is issued (i itself included)
        future = resolved > issued[i]
        other = scores.copy()
        other[future] = rng.normal(5, 3, size=other[future].shape)
        got, _ = aci.walk(st, other, issued, resolved, flush=False)
        np.testing.assert_array_equal(got[i], corr[i])
    assert not np.allclose(corr[0], corr[-1])  # the walk does move


def test_no_lookahead_on_real_windows():
    """Scramble every candle at and after a window's origin: the ACI correction issued to that
    window does not change (its sample paths held fixed, as the forecast test shows for them)."""
    rng = np.random.default_rng(1)
    ts = pd.bdate_range("2020-01-01", periods=160)
    vals = (
        100 * np.exp(np.cumsum(rng.normal(0, 0.01, (160, 1)), axis=0)) * np.ones((1, 6))
    ).astype(np.float32)
    s = Series("X", vals, ts, "x")
    w = build_windows([s], 10, 5, 70, 2)
    # (N, S, H, 6)
    samples = (w.context[:, -1][:, None, None, :] * np.exp(rng.normal(0, 0.01, (len(w), 8, 5, 6))))
    c_issued, c_resolved = _times(s, w.subset(np.arange(30)))
    cal = Calibration.fit(samples[:30], w.truth[:30], (0.5, 0.8), MODEL, "aci", issued=c_issued,
                          resolved=c_resolved)
    issued, resolved = _times(s, w.subset(np.arange(30, len(w))))
    corr = cal.walk(samples[30:], w.truth[30:], issued, resolved)
    for i in (3, 17, len(w) - 31):
        o = int(w.origins[30 + i])
        damaged = Series("X", damage_after(vals, o, seed=i), ts, "x")
        w2 = build_windows([damaged], 10, 5, 70, 2)
        assert (w2.truth[30 + i] != w.truth[30 + i]).any()  # its own truth did change
        got = cal.walk(
            samples[30:], w2.truth[30:], *_times(damaged, w2.subset(np.arange(30, len(w2))))
        )
        np.testing.assert_array_equal(got[i], corr[i])


def _times(series, w):
    return window_times(WalkForward([series], w, np.zeros(0), 0.0))


def test_aci_restores_coverage_after_a_shift():
    """Scores whose scale doubles after calibration: static CQR under-covers, ACI's long-run
    miscoverage stays within Gibbs & Candès's bound (1 + gamma) / (gamma T)."""
    rng = np.random.default_rng(2)
    cal_scores = np.abs(rng.normal(size=(200, 1, 1, 1)))
    later = 2 * np.abs(rng.normal(size=(2000, 1, 1, 1)))
    issued = np.arange(2000)
    st = aci.initial_state(cal_scores, [0.8], 0.02)
    corr, _ = aci.walk(st, later, issued, issued + 0.5, flush=False)
    cov_aci = (later <= corr).mean()
    cov_static = (later <= aci.conformal_corrections(cal_scores, np.array(0.8))).mean()
    assert cov_static < 0.6
    assert abs(cov_aci - 0.8) <= (1 + 0.02) / (0.02 * 2000) and abs(cov_aci - 0.8) < 0.03


def _windows(rng, n, scale=None):
    """Paths (N, S, H, 6) and truths (N, H, 6) around 100; ``scale`` (N,): each window's spread,
    paths and truth alike (a volatility the model tracks)."""
    scale = np.ones(n) if scale is None else np.asarray(scale, dtype=np.float64)
    sc = scale[:, None, None, None]
    paths = 100 * np.exp(0.01 * sc * rng.normal(size=(n, 32, 2, 6)))
    truth = 100 * np.exp(0.02 * sc[:, 0] * rng.normal(size=(n, 2, 6)))
    return paths, truth


def test_select_prefers_width_scaled_scores_when_volatility_shifts():
    """Spread x3 in the later half: cqr's additive correction (fitted on the calm half) under-covers
    there, cqr-r's width-scaled one does not; the nested split sees it and keeps cqr-r."""
    rng = np.random.default_rng(3)
    t = np.arange(400)
    cal = Calibration.fit(
        *_windows(rng, 400, np.where(t < 200, 1.0, 3.0)), (0.5, 0.8), MODEL, "select", issued=t,
        resolved=t,
    )
    assert cal.method == "cqr-r" and cal.info["selection"]["chosen"] == "cqr-r"
    gaps = cal.info["selection"]["validation_gap"]
    assert gaps["cqr-r"] < gaps["cqr"]


def test_select_keeps_cqr_on_a_tie():
    """Every window with the same paths: width-scaled scores are the plain ones over a constant,
    the coverages are equal, and the tie goes to cqr."""
    rng = np.random.default_rng(6)
    t = np.arange(100)
    paths = np.repeat(100 * np.exp(0.01 * rng.normal(size=(1, 32, 2, 6))), 100, axis=0)
    truth = 100 * np.exp(0.02 * rng.normal(size=(100, 2, 6)))
    cal = Calibration.fit(paths, truth, (0.5,), MODEL, "select", issued=t, resolved=t)
    gaps = cal.info["selection"]["validation_gap"]
    assert gaps["cqr"] == pytest.approx(gaps["cqr-r"]) and cal.method == "cqr"


def test_select_and_gamma_use_only_the_calibration_halves():
    """The selection's validation windows are the later half; its choice depends on no window
    it is not given, and the refit uses all of them."""
    rng = np.random.default_rng(4)
    paths, truth = _windows(rng, 200, np.exp(rng.uniform(-1, 1, 200)))
    t = np.arange(200)
    cal = Calibration.fit(paths, truth, (0.5, 0.8), MODEL, "aci", issued=t, resolved=t + 3)
    g, gaps = aci.choose_gamma(conformity_scores(paths, truth, (0.5, 0.8), [0, 1, 2, 3]), t, t + 3,
                               (0.5, 0.8), 3)
    assert cal.info["aci"]["gamma"] == g and g in aci.GAMMAS and set(gaps) == set(aci.GAMMAS)
    assert gaps[g] == min(gaps.values())
    assert cal.state.window == 100 and cal.state.scores.shape == (100, 2, 2, 4)
    with pytest.raises(CalibrationError, match="issue and resolution times"):
        Calibration.fit(paths, truth, (0.5,), MODEL, "aci")
    with pytest.raises(CalibrationError, match="at least"):
        Calibration.fit(
            paths[:10], truth[:10], (0.9,), MODEL, "aci", issued=t[:10], resolved=t[:10]
        )


def test_aci_file_roundtrip_and_static_apply(tmp_path):
    rng = np.random.default_rng(5)
    paths, truth = _windows(rng, 120)
    t = np.arange(120)
    cal = Calibration.fit(paths, truth, (0.5, 0.8), MODEL, "aci", issued=t, resolved=t)
    np.testing.assert_array_equal(cal.corrections, cal.state.correction())
    back = Calibration.load(cal.save(tmp_path / "aci.json"))
    assert back.method == "aci" and "Gibbs" in (tmp_path / "aci.json").read_text()
    np.testing.assert_allclose(back.corrections, cal.corrections)
    np.testing.assert_allclose(back.state.alpha, cal.state.alpha)
    new_p, new_t = _windows(rng, 20)
    tt = 200 + np.arange(20)
    np.testing.assert_allclose(back.walk(new_p, new_t, tt, tt), cal.walk(new_p, new_t, tt, tt))
    # applied from the file it is static: the interval is the cqr one widened by the stored
    # correction
    q = back.quantiles(new_p[..., 3], [0.1, 0.9])
    raw = np.quantile(new_p[..., 3], [0.1, 0.9], axis=1)
    np.testing.assert_allclose(np.log(q[1]), np.log(raw[1]) + back.corrections[1, :, 3], rtol=1e-10)
