"""Conformalized quantile regression: the correction by hand, coverage on fresh data, files,
and refusal for another model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.options import ForecastOptions
from kronos_core.calibration.conformal import (
    Calibration,
    CalibrationError,
    CalibrationMismatch,
    conformal_quantile,
)
from kronos_core.eval.metrics import covered

MODEL = {"name": "m", "sha256": "a" * 64}


def test_conformal_quantile_by_hand():
    scores = np.arange(1.0, 10.0)  # n = 9: level 0.8 -> ceil(10 * 0.8) = 8th smallest
    assert conformal_quantile(scores, 0.8) == 8.0
    assert conformal_quantile(scores, 0.5) == 5.0
    with pytest.raises(CalibrationError, match="too few"):
        conformal_quantile(scores, 0.95)  # needs ceil(10 * 0.95) = 10 > 9


def _lognormal_case(rng, n, width):
    """Sample paths far too narrow (log sd ``width``) around truths with log sd 0.05."""
    center = 100 * np.exp(rng.normal(0, 0.02, size=(n, 1, 3, 1)))
    paths = center * np.exp(rng.normal(0, width, size=(n, 64, 3, 6)))  # (N, S, H, 6)
    truth = center[:, 0] * np.exp(rng.normal(0, 0.05, size=(n, 3, 6)))  # (N, H, 6)
    return paths, truth


@pytest.mark.parametrize("method", ["cqr", "cqr-r"])
def test_calibrated_coverage_on_fresh_windows(method):
    rng = np.random.default_rng(0)
    paths, truth = _lognormal_case(rng, 2000, 0.01)
    cal = Calibration.fit(paths, truth, (0.5, 0.8, 0.9), MODEL, method)
    fresh_p, fresh_t = _lognormal_case(rng, 4000, 0.01)
    close = 3
    for c in (0.5, 0.8, 0.9):
        lv = [(1 - c) / 2, (1 + c) / 2]
        raw = np.quantile(fresh_p[..., close], lv, axis=1)
        fixed = cal.quantiles(fresh_p[..., close], lv)
        before = covered(raw[0], raw[1], fresh_t[..., close]).mean()
        after = covered(fixed[0], fixed[1], fresh_t[..., close]).mean()
        assert before < c - 0.3  # far too narrow
        assert abs(after - c) < 0.03


def test_correction_matches_definition():
    rng = np.random.default_rng(1)
    paths, truth = _lognormal_case(rng, 50, 0.02)
    cal = Calibration.fit(paths, truth, (0.8,), MODEL, "cqr", features=("close",))
    lo, hi = np.log(np.quantile(paths[..., 3], [0.1, 0.9], axis=1))
    y = np.log(truth[..., 3])
    e = np.sort(np.maximum(lo - y, y - hi), axis=0)  # (N, H)
    k = int(np.ceil(51 * 0.8))
    np.testing.assert_allclose(cal.corrections[0, :, 0], e[k - 1])
    q = cal.quantiles(paths[..., 3], [0.1, 0.9])
    np.testing.assert_allclose(np.log(q[1]), hi + e[k - 1], rtol=1e-10)


def test_quantiles_never_cross_and_median_is_raw():
    rng = np.random.default_rng(2)
    paths, truth = _lognormal_case(rng, 200, 0.2)  # far too wide: negative corrections
    cal = Calibration.fit(paths, truth, (0.5, 0.9), MODEL, "cqr")
    q = cal.quantiles(paths[..., 3], [0.05, 0.25, 0.5, 0.75, 0.95])
    assert (np.diff(q, axis=0) >= -1e-12).all()
    assert (cal.corrections < 0).any()
    with pytest.raises(CalibrationError, match="outside the calibrated levels"):
        cal.quantiles(paths[..., 3], [0.01])


def test_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(3)
    paths, truth = _lognormal_case(rng, 40, 0.02)
    cal = Calibration.fit(paths, truth, (0.5, 0.8), MODEL, "cqr-r", info={"windows": 40})
    back = Calibration.load(cal.save(tmp_path / "c.json"))
    np.testing.assert_allclose(back.corrections, cal.corrections)
    assert back.levels == cal.levels and back.method == "cqr-r" and back.model == MODEL
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(CalibrationError, match="not a calibration file"):
        Calibration.load(tmp_path / "bad.json")


def _inputs(n=2, length=40, horizon=3):
    rng = np.random.default_rng(4)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, size=(n, length)), axis=1))
    vals = np.stack(
        [close, close * 1.01, close * 0.99, close, np.full_like(close, 1e5), close * 1e5], -1
    )
    ts = pd.date_range("2024-01-01", periods=length + horizon, freq="D")
    return list(vals.astype(np.float32)), [ts[:length]] * n, [ts[length:]] * n


def test_forecast_applies_calibration_for_its_model(predictor):
    series, xts, yts = _inputs()
    raw = predictor.forecast(
        series, xts, yts, ForecastOptions(3, sample_count=8, seed=1, quantiles=(0.1, 0.9))
    )
    rng = np.random.default_rng(5)
    # (B, H, 6)
    fake_truth = raw.paths.mean(axis=1) * np.exp(rng.normal(0, 0.2, size=raw.mean.shape))
    paths = np.repeat(raw.paths, 10, axis=0)
    cal = Calibration.fit(
        paths, np.repeat(fake_truth, 10, axis=0), (0.8,), predictor.identity.as_dict()
    )
    res = predictor.forecast(
        series, xts, yts,
        ForecastOptions(3, sample_count=8, seed=1, quantiles=(0.1, 0.9), calibration=cal),
    )
    # the paths are mapped onto the corrected bands, as the service does (issue 27)
    np.testing.assert_allclose(
        res.paths, cal.correct_paths(raw.paths, predictor.identity), rtol=1e-5
    )
    assert not np.allclose(res.paths[..., 3], raw.paths[..., 3])
    np.testing.assert_allclose(
        res.quantiles, cal.apply(raw.paths, (0.1, 0.9), predictor.identity), rtol=1e-6
    )
    assert not np.allclose(res.quantiles[..., 3], raw.quantiles[..., 3])
    # volume not calibrated
    np.testing.assert_allclose(res.quantiles[..., 4], raw.quantiles[..., 4])


def test_forecast_refuses_calibration_of_another_model(predictor):
    series, xts, yts = _inputs()
    rng = np.random.default_rng(6)
    paths, truth = _lognormal_case(rng, 30, 0.02)
    other = Calibration.fit(paths, truth, (0.5,), {"name": "kronos-small", "sha256": "b" * 64})
    with pytest.raises(CalibrationMismatch, match="kronos-small.*cannot be applied to"):
        predictor.forecast(
            series, xts, yts,
            ForecastOptions(3, sample_count=2, seed=1, quantiles=(0.25, 0.75), calibration=other),
        )
