"""Recording answered forecasts in the ledger (service/gateway/record.py), with the fake
store and replicas: rows equal the answer, ``record: false`` records nothing, inline series
carry their candles' hash, and a failing disk fails the recording, never the forecast."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading

import numpy as np
import pandas as pd
import pytest
from service_fakes import fake_gateway, sample_value

from kronos_core.ledger.ledger import Ledger
from kronos_core.ledger.records import series_hash
from service.common.schemas import ForecastRequest
from service.gateway.record import LedgerRecorder


def recording_gateway(root, **kw):
    gw, m, _ = fake_gateway()
    gw.recorder = LedgerRecorder(lambda: Ledger(root, writer_id="gw-test"), m, **kw)
    return gw, m


def forecast(gw, **fields):
    """The gateway's answer, then its recording, as the route does once the answer is sent."""
    req = ForecastRequest(**{"horizon": 4, "lookback": 16, "quantiles": [0.1, 0.5, 0.9], **fields})
    out = asyncio.run(gw.forecast(req))
    gw.record(out)
    return out


def test_answered_forecasts_are_the_ledger_rows(tmp_path):
    gw, m = recording_gateway(tmp_path)
    out = forecast(gw, symbols=["S000", "S001", "S002", "NOPE"])
    assert gw.recorder.flush()
    rows = Ledger(tmp_path).read().to_pandas()
    # the 3 forecast symbols x 4 steps; the unknown one is an error, not a row
    assert len(rows) == 3 * 4
    assert set(rows["request_id"]) == {out.request_id}
    assert out.request_id
    for i, sym in enumerate(out.symbols):
        mine = rows[rows["symbol"] == sym].sort_values("horizon_step")
        assert list(mine["horizon_step"]) == [1, 2, 3, 4]
        np.testing.assert_allclose(mine["mean_close"], out.mean[i][:, 3], rtol=1e-6)
        for k, lv in enumerate((0.1, 0.5, 0.9)):
            np.testing.assert_allclose(mine[f"close_q{lv:g}"], out.quantiles[i][k, :, 3], rtol=1e-6)
        assert (mine["step_time"].to_numpy() == out.timestamps[i]).all()
        assert (mine["origin"] == pd.Timestamp(out.last_timestamp[i])).all()
        assert (mine["source"] == "store").all()
        assert mine["last_close"].iloc[0] == pytest.approx(float(out.histories[i][-1, 3]))
    assert sample_value(m, "kronos_ledger_rows_total") == 3
    assert sample_value(m, "kronos_ledger_write_failures_total") == 0
    # each gateway writes its own files
    assert all(p.name.startswith("gw-test-") for p in Ledger(tmp_path).files())


def test_record_false_records_nothing(tmp_path):
    gw, _ = recording_gateway(tmp_path)
    out = forecast(gw, symbols=["S000"], record=False)
    assert out.symbols == ["S000"]
    assert gw.recorder.flush()
    assert Ledger(tmp_path).read().num_rows == 0
    assert ForecastRequest(symbols=["S000"], horizon=2).record is True  # the default: recorded


def test_inline_series_are_recorded_with_their_candles_hash(tmp_path):
    gw, _ = recording_gateway(tmp_path)
    ts = pd.date_range("2024-03-01", periods=20, freq="h")
    candles = [
        [t.isoformat(), 10.0 + i, 11.0 + i, 9.0 + i, 10.5 + i, 100.0, 1000.0]
        for i, t in enumerate(ts)
    ]
    out = forecast(gw, series=[{"symbol": "MINE", "candles": candles}])
    assert gw.recorder.flush()
    rows = Ledger(tmp_path).read().to_pandas()
    assert set(rows["symbol"]) == {"MINE"} and (rows["source"] == "inline").all()
    # the hash is of the candles the forecast used:
    values = np.asarray([c[1:] for c in candles], np.float32)
    # the lookback's
    assert set(rows["series_hash"]) == {series_hash(ts.to_numpy()[-16:], values[-16:])}
    assert out.symbols == ["MINE"]


def test_answer_names_its_request_id(tmp_path):
    from service.common.answer import ForecastResponse
    from service.gateway.encode import answer_to_json

    gw, _ = recording_gateway(tmp_path)
    body = answer_to_json(forecast(gw, symbols=["S000"]))
    assert {"request_id", "calibration_state"} <= set(ForecastResponse.model_fields) & set(body)
    assert body["request_id"] and body["calibration_state"] is None  # no calibration configured


def test_unwritable_ledger_folder_fails_the_recording_not_the_forecast(tmp_path, caplog):
    blocker = tmp_path / "ledger"
    blocker.write_text("a file where the ledger folder should be")  # mkdir fails, even as root
    gw, m = recording_gateway(blocker)
    with caplog.at_level(logging.WARNING, logger="service.gateway.record"):
        out = forecast(gw, symbols=["S000", "S001"])
        assert gw.recorder.flush()
    assert out.symbols == ["S000", "S001"]  # answered
    assert sample_value(m, "kronos_ledger_write_failures_total") == 1
    assert sample_value(m, "kronos_ledger_rows_total") == 0
    line = next(r.getMessage() for r in caplog.records if "not recorded" in r.getMessage())
    assert out.request_id in line and "2 forecast(s)" in line and "ledger" in line


def test_full_disk_fails_the_recording_not_the_forecast(tmp_path, monkeypatch, caplog):
    import kronos_core.ledger.ledger as ledger_mod

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger_mod.pq, "write_table", no_space)
    gw, m = recording_gateway(tmp_path)
    with caplog.at_level(logging.WARNING, logger="service.gateway.record"):
        out = forecast(gw, symbols=["S000"])
        assert gw.recorder.flush()
    assert out.symbols == ["S000"]
    assert sample_value(m, "kronos_ledger_write_failures_total") == 1
    assert any("No space left on device" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()  # the disk has room again: the next answer is recorded
    forecast(gw, symbols=["S001"])
    assert gw.recorder.flush()
    assert set(Ledger(tmp_path).read()["symbol"].to_pylist()) == {"S001"}
    assert not list(tmp_path.rglob("*.tmp"))  # the failed write left nothing behind


def test_the_answer_never_waits_for_a_slow_disk(tmp_path):
    release = threading.Event()
    gw, m = recording_gateway(tmp_path, max_queue=2)
    real = gw.recorder._write

    written = threading.Event()

    def slow_write(ledger, batch):  # the disk is stuck until the test releases it
        release.wait(600)
        real(ledger, batch)
        written.set()

    gw.recorder._write = slow_write
    for i in range(5):  # 1 held by the writer, 2 queued, 2 dropped (queue full)
        forecast(gw, symbols=[f"S00{i}"])
    # every answer came back while no write could finish: none waited for the stuck disk (one
    # that did would come back only after release.wait gave up, a write done by then)
    assert not written.is_set()
    assert sample_value(m, "kronos_ledger_write_failures_total") >= 1
    release.set()
    assert gw.recorder.flush()
    written = Ledger(tmp_path).read()["request_id"].to_pylist()
    assert 1 <= len(set(written)) <= 3
    assert gw.recorder.written + gw.recorder.failed == 5


def test_answers_within_the_gather_window_share_one_file_and_flush_does_not_wait_it_out(tmp_path):
    gw, m = recording_gateway(tmp_path, gather_s=3600.0)
    outs = [forecast(gw, symbols=[f"S00{i}"]) for i in range(3)]
    # a writer that gathered on would write only after the hour: flush would give up (False)
    assert gw.recorder.flush(timeout_s=600)
    files = Ledger(tmp_path).files()
    assert len(files) == 1
    rows = Ledger(tmp_path).read().to_pandas()
    assert set(rows["request_id"]) == {o.request_id for o in outs} and len(rows) == 3 * 4
    assert gw.recorder.written == 3 and sample_value(m, "kronos_ledger_rows_total") == 3
    # without a window, an answer that comes alone is written alone
    gw0, _ = recording_gateway(tmp_path / "apart", gather_s=0.0)
    for i in range(2):
        forecast(gw0, symbols=[f"S00{i}"])
        assert gw0.recorder.flush()
    assert len(Ledger(tmp_path / "apart").files()) == 2


def test_a_failed_gathered_write_fails_every_answer_in_it(tmp_path, monkeypatch):
    gw, m = recording_gateway(tmp_path, gather_s=30.0)

    def full_disk(ledger, answers):
        raise OSError(errno.ENOSPC, "No space left on device")

    gw.recorder._write = full_disk
    for i in range(3):
        forecast(gw, symbols=[f"S00{i}"])
    assert gw.recorder.flush()
    assert gw.recorder.failed == 3 and gw.recorder.written == 0
    assert sample_value(m, "kronos_ledger_write_failures_total") == 3
    gw.recorder.close()


def test_the_calibration_state_the_replicas_applied_is_answered_and_recorded(tmp_path):
    from service_fakes import FakeReplicas, fake_info

    from kronos_core.calibration.conformal import Calibration
    from kronos_core.calibration.policy import CalibrationDescription
    from service.gateway.encode import answer_to_json

    cal = Calibration.from_description({"method": "aci", "levels": [0.8], "horizon": 8})
    info = fake_info()
    info.calibration = CalibrationDescription("fake", "x", cal.describe())
    info.model["calibration"] = info.calibration.as_dict()
    stamp = {
        "method": "aci", "version": 3, "hash": "c0ffee", "updated_at": "2026-01-05T10:00:00+00:00",
    }

    class StampingReplicas(FakeReplicas):
        async def forecast_shard(self, shard):
            res = await super().forecast_shard(shard)
            res.calibration_state = stamp if shard.calibrate else None
            return res

    gw, m, _ = fake_gateway(replicas=StampingReplicas(info=info))
    gw.recorder = LedgerRecorder(lambda: Ledger(tmp_path, writer_id="gw-test"), m)
    out = forecast(gw, symbols=["S000", "S001"])
    body = answer_to_json(out)
    assert body["calibrated"] is True and body["calibration_state"] == stamp
    assert gw.recorder.flush()
    rows = Ledger(tmp_path).read().to_pandas()
    assert set(rows["calibration_method"]) == {"aci"} and set(rows["calibration_version"]) == {3}
    assert set(rows["calibration_hash"]) == {"c0ffee"}
    assert (rows["calibration_updated_at"] == pd.Timestamp("2026-01-05T10:00:00Z")).all()
