"""Quantile calibration in the service: the replica loads KRONOS_CALIBRATION (refused when fitted
for another model), the gateway asks for it only when it covers the request, and answers say
`calibrated: true` and name the model it was fitted for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY
from service_fakes import make_options, make_shard, run_shards

from kronos_core.calibration.conformal import Calibration, CalibrationMismatch
from kronos_core.calibration.policy import CalibrationDescription, CalibrationPolicy
from kronos_core.loading import PredictorConfig, load_predictor
from service.common.settings import Settings
from service.replica.deployment import Predictor
from service.replica.loop_worker import load_calibration
from service.replica.step_runner import StepRunner


def _calibration(identity: dict, path, method: str = "cqr") -> Calibration:
    """A calibration with known, non-zero corrections (levels 0.5 and 0.8, horizon 3)."""
    rng = np.random.default_rng(0)
    samples = rng.lognormal(4, 0.01, (40, 16, 3, 6))
    truth = rng.lognormal(4, 0.05, (40, 3, 6))  # wider than the samples: bands must widen
    # windows 3 rows apart, horizon 3: each truth known before the next issue
    issued = np.arange(40) * 3
    cal = Calibration.fit(
        samples, truth, (0.5, 0.8), identity, method, issued=issued, resolved=issued + 3
    )
    cal.save(path)
    return cal


def test_covers_only_what_the_calibration_was_fitted_for():
    policy = CalibrationPolicy.from_description(
        CalibrationDescription(None, None, {"levels": [0.5, 0.8], "horizon": 3})
    )
    assert policy.covers(3, [0.1, 0.5, 0.9])
    assert policy.covers(2, [0.25, 0.75])
    assert not policy.covers(4, [0.1, 0.9])  # horizon beyond the fitted one
    assert not policy.covers(3, [0.01, 0.99])  # 98% interval: not fitted
    assert not policy.covers(3, [])  # nothing to correct


@pytest.mark.parametrize("method", ["cqr", "aci", "select"])
def test_runner_applies_the_calibration_only_when_the_key_asks(tmp_path, method):
    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    runner = StepRunner(predictor, "r", "cpu")
    _calibration(predictor.identity.as_dict(), tmp_path / "cal.json", method)
    # as the replica does
    runner.calibration = load_calibration(str(tmp_path / "cal.json"), predictor.identity)
    assert runner.calibration.method in (("cqr", "cqr-r") if method == "select" else (method,))
    options = make_options(horizon=3, sample_count=8, seed=3, quantiles=(0.1, 0.9))
    shard = make_shard(2, length=40, options=options, start=100.0, return_paths=True)
    rng = np.random.default_rng(1)
    shard.values = [
        np.abs(100 + np.cumsum(rng.normal(0, 1, (40, 6)), axis=0)).astype(np.float32)
        for _ in range(2)
    ]
    (raw,), _ = run_shards(runner, [shard])
    shard.calibrate = True
    (cal,), _ = run_shards(runner, [shard])
    np.testing.assert_array_equal(raw.mean, cal.mean)  # the mean stays raw
    # the paths are those of the corrected distribution, so summaries from them agree with the bands
    np.testing.assert_allclose(
        cal.paths, runner.calibration.correct_paths(raw.paths, predictor.identity), rtol=1e-6
    )
    want = runner.calibration.apply(raw.paths, (0.1, 0.9), predictor.identity)  # (Q, B, H, 6)
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
    front = Predictor.func_or_class(Settings(model_dir=TINY, device="cpu", calibration=str(path)))
    replica = front.core  # its step loops in this process (a LoopWorker)
    assert replica.runners and all(r.calibration is not None for r in replica.runners)
    assert replica.calibration == CalibrationDescription.of(cal)  # typed, in its ReplicaInfo too
    assert replica.model["calibration"] == replica.calibration.as_dict()
    assert replica.model["calibration"]["model_sha256"] == replica.model["sha256"]
    ts = pd.date_range("2024-01-02", periods=3, freq="D")
    assert len(ts) == replica.model["calibration"]["horizon"]


def _inline(symbol: str, n: int, freq: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2024-01-01", periods=n, freq=freq)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    rows = [[t.isoformat(), c, c * 1.005, c * 0.995, c, 1000.0] for t, c in zip(ts, close)]
    return {"symbol": symbol, "candles": rows}


def _calibrated_gateway(tmp_path, scope):
    """A gateway over one real replica (tiny model, StepRunner) holding a calibration of
    ``scope``."""
    import dataclasses

    from service_fakes import FakeReplicas, fake_gateway, fake_info

    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    cal = _calibration(predictor.identity.as_dict(), tmp_path / "cal.json")
    cal = dataclasses.replace(cal, scope=scope)
    replicas = FakeReplicas(info=fake_info())
    replicas.runner = StepRunner(predictor, "r", "cpu")
    replicas.runner.calibration = cal
    replicas.info.calibration = CalibrationDescription.of(cal)
    replicas.info.model = {
        **predictor.identity.as_dict(), "calibration": replicas.info.calibration.as_dict(),
    }
    gw, _, _ = fake_gateway(replicas)
    return gw, cal, predictor


def test_gateway_calibrates_per_series_and_says_why_not(tmp_path):
    """A calibration fitted on daily bars at lookback 40: the daily series is calibrated, the
    hourly one is not and its warning says why; a horizon beyond the calibration's warns too."""
    import asyncio

    from kronos_core.calibration.conformal import Scope
    from service.common.schemas import ForecastRequest

    gw, cal, predictor = _calibrated_gateway(tmp_path, Scope((40, 40), ("1d",), ("D",)))
    series = [_inline("D", 40, "D", 0), _inline("H", 40, "h", 1)]
    req = ForecastRequest(
        series=series, horizon=3, quantiles=[0.1, 0.5, 0.9], sample_count=8, seed=1, lookback=40
    )
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["D", "H"] and not out.calibrated  # not every series is
    codes = [[(w["code"], w["message"]) for w in ws] for ws in out.warnings]
    assert not any(c == "uncalibrated" for c, _ in codes[0])
    assert ("uncalibrated", "quantiles not calibrated: fitted on 1d bars, asked 1h") in codes[1]
    out = asyncio.run(
        gw.forecast(
            ForecastRequest(
                series=series[:1], horizon=5, quantiles=[0.1, 0.9], sample_count=4, lookback=40
            )
        )
    )
    assert not out.calibrated
    assert ("uncalibrated", "quantiles not calibrated: fitted for horizon 3, asked 5") in [
        (w["code"], w["message"]) for w in out.warnings[0]]
    out = asyncio.run(
        gw.forecast(
            ForecastRequest(
                series=series[:1], horizon=3, quantiles=[0.1, 0.9], sample_count=4, lookback=40
            )
        )
    )
    assert out.calibrated and out.warnings[0] == []


def test_with_no_lookback_asked_the_calibrations_fitted_lookback_is_read(tmp_path):
    """A calibration fitted at lookback 40 and a request with no lookback: the gateway reads 40
    candles (not max_context - horizon = 61), the series is calibrated, and the answer says
    where its lookback came from (issue 26, item 6)."""
    import asyncio

    from kronos_core.calibration.conformal import Scope
    from service.common.schemas import ForecastRequest
    from service.gateway.encode import answer_to_json

    gw, _, _ = _calibrated_gateway(tmp_path, Scope((40, 40), ("1d",), None))
    req = ForecastRequest(series=[_inline("D", 90, "D", 0)], horizon=3, quantiles=[0.1, 0.9],
                          sample_count=4)
    out = asyncio.run(gw.forecast(req))
    assert out.history_length == [40] and out.timing["lookback"] == 40
    assert out.calibrated and out.warnings[0] == []  # a window the caller did not ask: no cut
    lookback = answer_to_json(out)["lookback"]
    assert lookback["value"] == 40 and lookback["source"] == "calibration"
    assert "fitted lookback 40" in lookback["note"]
    asked = asyncio.run(gw.forecast(req.model_copy(update={"lookback": 60})))
    assert asked.history_length == [60] and not asked.calibrated  # asked wins; the warning says why
    assert "fitted for lookback 40, asked 60" in " ".join(w["message"] for w in asked.warnings[0])


def test_calibrated_summaries_agree_with_the_calibrated_bands(tmp_path):
    """The summary comes from the corrected paths: their quantiles match the calibrated close
    quantile (the calibration is fitted at 50% and 80%: the 10% quantile is compared), and P(up)
    agrees with where the calibrated median sits."""
    import asyncio

    from kronos_core.base.candles import FEATURES
    from kronos_core.calibration.conformal import Scope
    from service.common.schemas import ForecastRequest

    gw, cal, _ = _calibrated_gateway(tmp_path, Scope())
    series = [_inline("D", 40, "D", 0)]
    req = ForecastRequest(
        series=series, horizon=3, quantiles=[0.1, 0.5, 0.9], sample_count=100, seed=2, summary=True,
        return_paths=True,
    )
    out = asyncio.run(gw.forecast(req))
    assert out.calibrated
    close = FEATURES.index("close")
    last = float(series[0]["candles"][-1][4])
    q10 = float(out.quantiles[0][0, -1, close])
    ret = out.paths[0][:, -1, close] / last - 1
    assert np.quantile(ret, 0.1) == pytest.approx(q10 / last - 1, abs=2e-3)
    # nothing to calibrate: raw paths
    raw = asyncio.run(gw.forecast(req.model_copy(update={"quantiles": []})))
    assert not np.allclose(raw.paths[0], out.paths[0])
    assert out.summaries[0]["var_95"] != pytest.approx(raw.summaries[0]["var_95"], abs=1e-4)


def test_gateway_picks_each_series_group_of_a_calibration_fitted_per_frequency(tmp_path):
    import asyncio
    import dataclasses

    from service_fakes import FakeReplicas, fake_gateway, fake_info

    from kronos_core.calibration.conformal import Scope
    from service.common.schemas import ForecastRequest

    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    base = _calibration(predictor.identity.as_dict(), tmp_path / "cal.json")
    daily = dataclasses.replace(base, scope=Scope(None, ("1d",), ("D",)))
    hourly = dataclasses.replace(
        base, corrections=base.corrections * 3, scope=Scope(None, ("1h",), ("H",))
    )
    cal = Calibration.grouped({"1d": daily, "1h": hourly}, "frequency")
    replicas = FakeReplicas(info=fake_info())
    replicas.runner = StepRunner(predictor, "r", "cpu")
    replicas.runner.calibration = cal
    replicas.info.calibration = CalibrationDescription.of(cal)
    replicas.info.model = {
        **predictor.identity.as_dict(), "calibration": replicas.info.calibration.as_dict(),
    }
    gw, _, _ = fake_gateway(replicas)
    series = [_inline("D", 40, "D", 0), _inline("H", 40, "h", 1), _inline("M", 40, "5min", 2)]
    req = ForecastRequest(
        series=series, horizon=3, quantiles=[0.1, 0.9], sample_count=8, seed=1, return_paths=True
    )
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["D", "H", "M"] and not out.calibrated
    assert [w["code"] for w in out.warnings[0] + out.warnings[1]] == []
    assert out.warnings[2] == [
        {
            "code": "uncalibrated",
            "message": "quantiles not calibrated: no group for frequency 5min; fitted for 1d, 1h",
        }
    ]
    # nothing to calibrate: raw paths
    raw = asyncio.run(gw.forecast(req.model_copy(update={"quantiles": []})))
    for i, member in ((0, daily), (1, hourly)):
        want = member.apply(raw.paths[i][None], (0.1, 0.9), predictor.identity)[:, 0]  # (Q, H, 6)
        np.testing.assert_allclose(out.quantiles[i], want, rtol=1e-5)


@pytest.mark.parametrize("levels, calibrated", [((0.1, 0.5, 0.9), True), ((0.01, 0.99), False)])
def test_the_library_and_the_service_give_the_same_seeded_paths_and_quantiles(
    tmp_path, levels, calibrated
):
    """``KronosPredictor.forecast`` with the request's options (and, where the policy applies, the
    calibration) on the gateway's own inputs, against the service's answer: the same paths,
    quantiles and means. 98% bands are outside the calibration: the uncalibrated case. The service
    may run a series in another batch than the library's one call; the draws are the same, and the
    decoded values agree to float32 rounding (rtol 1e-6: a few ulps; a calibration applied on one
    side only moves them by whole price units)."""
    import asyncio

    from kronos_core.calibration.conformal import Scope
    from service.common.schemas import ForecastRequest
    from service.gateway.shards import request_options

    gw, cal, predictor = _calibrated_gateway(tmp_path, Scope())
    series = [_inline("D", 40, "D", 0), _inline("E", 33, "D", 3), _inline("F", 40, "D", 4)]
    req = ForecastRequest(series=series, horizon=3, quantiles=list(levels), sample_count=8, seed=5,
                          return_paths=True, lookback=40)
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["D", "E", "F"] and out.calibrated is calibrated
    prep = gw.prepare(req, 40)
    options = request_options(req)
    res = predictor.forecast(prep.values, prep.x_ts, prep.y_ts,
                             options.with_(calibration=cal) if calibrated else options)
    for i in range(3):
        np.testing.assert_allclose(out.paths[i], res.paths[i], rtol=1e-6, atol=0)
        np.testing.assert_allclose(out.quantiles[i], res.quantiles[:, i], rtol=1e-6, atol=0)
        np.testing.assert_allclose(out.mean[i], res.mean[i], rtol=1e-6, atol=0)
