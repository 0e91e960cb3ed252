"""Quantile calibration in the service: the replica loads KRONOS_CALIBRATION (refused when fitted
for another model), the gateway asks for it only when it covers the request, and answers say
`calibrated: true` and name the model it was fitted for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY
from service_fakes import make_options, make_shard

from kronos_core.eval.calibration import Calibration, CalibrationMismatch
from kronos_core.loading import PredictorConfig, load_predictor
from service.batch_runner import BatchRunner
from service.gateway.plan import calibration_covers
from service.replica import Predictor, calibration_info, load_calibration
from service.settings import Settings


def _calibration(identity: dict, path, method: str = "cqr") -> Calibration:
    """A calibration with known, non-zero corrections (levels 0.5 and 0.8, horizon 3)."""
    rng = np.random.default_rng(0)
    samples = rng.lognormal(4, 0.01, (40, 16, 3, 6))
    truth = rng.lognormal(4, 0.05, (40, 3, 6))  # wider than the samples: bands must widen
    issued = np.arange(40) * 3  # windows 3 rows apart, horizon 3: each truth known before the next issue
    cal = Calibration.fit(samples, truth, (0.5, 0.8), identity, method, issued=issued, resolved=issued + 3)
    cal.save(path)
    return cal


def test_covers_only_what_the_calibration_was_fitted_for():
    info = {"levels": [0.5, 0.8], "horizon": 3}
    assert calibration_covers(info, 3, [0.1, 0.5, 0.9])
    assert calibration_covers(info, 2, [0.25, 0.75])
    assert not calibration_covers(info, 4, [0.1, 0.9])  # horizon beyond the fitted one
    assert not calibration_covers(info, 3, [0.01, 0.99])  # 98% interval: not fitted
    assert not calibration_covers(info, 3, [])  # nothing to correct
    assert not calibration_covers(None, 3, [0.1, 0.9])


@pytest.mark.parametrize("method", ["cqr", "aci", "select"])
def test_runner_applies_the_calibration_only_when_the_key_asks(tmp_path, method):
    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    runner = BatchRunner(predictor, "r", "cpu")
    _calibration(predictor.identity.as_dict(), tmp_path / "cal.json", method)
    runner.calibration = load_calibration(str(tmp_path / "cal.json"), predictor.identity)  # as the replica does
    assert runner.calibration.method in (("cqr", "cqr-r") if method == "select" else (method,))
    options = make_options(horizon=3, sample_count=8, seed=3, quantiles=(0.1, 0.9))
    shard = make_shard(2, length=40, options=options, start=100.0, return_paths=True)
    rng = np.random.default_rng(1)
    shard.values = [np.abs(100 + np.cumsum(rng.normal(0, 1, (40, 6)), axis=0)).astype(np.float32) for _ in range(2)]
    raw = runner.run([shard])[0][0]
    shard.calibrate = True
    cal = runner.run([shard])[0][0]
    np.testing.assert_array_equal(raw.mean, cal.mean)  # paths and mean stay raw
    np.testing.assert_array_equal(raw.paths, cal.paths)
    want = runner.calibration.apply(cal.paths, (0.1, 0.9), predictor.identity)  # (Q, B, H, 6)
    np.testing.assert_allclose(cal.quantiles, want, rtol=1e-6)
    assert not np.allclose(cal.quantiles, raw.quantiles)


def test_replica_refuses_a_calibration_for_another_model(tmp_path):
    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    other = {**predictor.identity.as_dict(), "sha256": "0" * 64, "name": "someone-else"}
    path = tmp_path / "other.json"
    _calibration(other, path)
    with pytest.raises(CalibrationMismatch, match="someone-else"):
        load_calibration(str(path), predictor.identity)
    settings = Settings(model_dir=TINY, device="cpu", calibration=str(path))
    with pytest.raises(CalibrationMismatch):
        Predictor.func_or_class(settings)


def test_replica_reports_its_calibration(tmp_path):
    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    path = tmp_path / "cal.json"
    cal = _calibration(predictor.identity.as_dict(), path)
    replica = Predictor.func_or_class(Settings(model_dir=TINY, device="cpu", calibration=str(path)))
    assert replica.runner.calibration is not None
    assert replica.model["calibration"] == calibration_info(cal)
    assert replica.model["calibration"]["model_sha256"] == replica.model["sha256"]
    ts = pd.date_range("2024-01-02", periods=3, freq="D")
    assert len(ts) == replica.model["calibration"]["horizon"]
