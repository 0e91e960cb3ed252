"""The service's live accuracy (service/live_accuracy.py) and adaptive calibration
(service/replica/calibration.py) over a real ledger and a real store in a temporary folder: a
scoring pass scores only what has its truth, sets the gauges to what kronos_core.eval's metric
functions give on the same forecasts and truths, answers /v1/accuracy's shape, runs in one
gateway at a time, skips a corrupt file with a warning naming it, and moves the ACI state
that the replicas then apply."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from service_fakes import sample_value

from kronos_core.calibration import aci
from kronos_core.calibration.conformal import Calibration
from kronos_core.data.store import KlineStore
from kronos_core.eval import metrics as em
from kronos_core.ledger.adaptive import corrections_hash
from kronos_core.ledger.ledger import Ledger
from kronos_core.ledger.records import CalibrationStamp, ForecastRecord
from service.common.metrics import Metrics
from service.common.schemas import AccuracyResponse
from service.common.settings import Settings
from service.live_accuracy import GatewayAdaptation, LiveAccuracy, scoring_lock
from service.replica.calibration import ReplicaCalibration

# the bundled real CSVs
REAL = Path(__import__("kronos_core.data", fromlist=["x"]).__file__).parent / "real"
LEVELS = (0.1, 0.5, 0.9)
MODEL = {"name": "fake-model", "sha256": "ab" * 32}


def goog() -> pd.DataFrame:
    df = pd.read_csv(REAL / "goog_daily.csv", parse_dates=["timestamps"])
    df["amount"] = df["volume"] * df["close"]
    return df


def make_store(root: Path, upto: int) -> KlineStore:
    store = KlineStore(root)
    store.write("GOOG", goog().iloc[:upto], frequency="1d", timezone="America/New_York")
    return store


def records(df: pd.DataFrame, origins: range, horizon: int = 3, width: float = 0.02,
            stamp: CalibrationStamp | None = None) -> list[ForecastRecord]:
    """A forecast per origin row: mean = the origin's close, band +-width (relative)."""
    out = []
    for o in origins:
        last = float(df["close"].iloc[o])
        mean = np.full(horizon, last)
        q = {0.1: mean * (1 - width), 0.5: mean, 0.9: mean * (1 + width)}
        out.append(ForecastRecord(
            request_id=f"r{o}", symbol="GOOG", origin=df["timestamps"].iloc[o],
            timestamps=list(df["timestamps"].iloc[o + 1:o + 1 + horizon]), mean={"close": mean},
            quantiles={lv: {"close": v} for lv, v in q.items()}, model_sha256=MODEL["sha256"],
            model_name=MODEL["name"], calibration=stamp, last_close=last, frequency="1d"))
    return out


def direct(
    df: pd.DataFrame, origins: range, horizon: int = 3, width: float = 0.02, upto: int | None = None
):
    """coverage(0.8), CRPS (2 x mean pinball over the levels), MAE over every step with a truth,
    computed with kronos_core.eval.metrics' own functions."""
    cov, crps, mae = [], [], []
    for o in origins:
        last = float(df["close"].iloc[o])
        for h in range(1, horizon + 1):
            if upto is not None and o + h >= upto:
                continue
            y = np.array([[float(df["close"].iloc[o + h])]])
            mean = np.array([[last]])
            lo, hi = mean * (1 - width), mean * (1 + width)
            cov.append(float(em.covered(lo, hi, y)[0, 0]))
            pins = [
                em.pinball_elements(v, y, lv)[0, 0] for lv, v in ((0.1, lo), (0.5, mean), (0.9, hi))
            ]
            crps.append(2 * float(np.mean(pins)))
            mae.append(float(em.abs_errors(mean, y)[0, 0]))
    return len(cov), float(np.mean(cov)), float(np.mean(crps)), float(np.mean(mae))


def live(
    tmp_path: Path, store: KlineStore, adaptive=None, **settings
) -> tuple[LiveAccuracy, Metrics]:
    s = Settings(
        store_dir=str(tmp_path / "store"), ledger_dir=str(tmp_path / "ledger"), score_interval_s=0,
        **settings,
    )
    m = Metrics()
    acc = LiveAccuracy(
        s, str(tmp_path / "ledger"), store, m, lambda: Ledger(tmp_path / "ledger", writer_id="gw0"),
        adaptive,
    )
    return acc, m


def test_a_pass_scores_what_has_its_truth_and_sets_the_gauges(tmp_path):
    df = goog()
    store = make_store(tmp_path / "store", 200)
    Ledger(tmp_path / "ledger", writer_id="gw1").record(records(df, range(180, 200)))
    acc, m = live(tmp_path, store)

    done = acc.score_pass()
    # truths up to row 199 only: no look-ahead
    n, cov, crps, mae = direct(df, range(180, 200), upto=200)
    assert done is not None and done["scored"] == n == 20 * 3 - 6
    labels = {"model": "fake-model"}
    assert sample_value(m, "kronos_forecast_coverage", {**labels, "level": "0.8"}) == pytest.approx(
        cov
    )
    assert sample_value(m, "kronos_forecast_crps", labels) == pytest.approx(crps)
    assert sample_value(m, "kronos_forecasts_scored_total", labels) == n
    assert sample_value(m, "kronos_forecast_window_scored", labels) == n

    store.write("GOOG", df.iloc[200:205], frequency="1d")  # the next days' candles arrive
    assert acc.score_pass()["scored"] == 6  # only the steps that waited; nothing scored twice
    n, cov, crps, mae = direct(df, range(180, 200))
    assert sample_value(m, "kronos_forecasts_scored_total", labels) == n == 60
    assert sample_value(m, "kronos_forecast_coverage", {**labels, "level": "0.8"}) == pytest.approx(
        cov
    )

    body = AccuracyResponse.model_validate(acc.answer()).model_dump()
    assert body["all_time"]["scored"] == 60
    assert body["all_time"]["coverage"]["0.8"] == pytest.approx(cov)
    assert body["all_time"]["crps"] == pytest.approx(crps)
    assert body["all_time"]["mae"] == pytest.approx(mae)
    step1 = acc.answer(horizon_step=1, model="fake-model", symbol="GOOG")
    assert step1["all_time"]["scored"] == 20
    assert acc.answer(symbol="OTHER")["all_time"]["scored"] == 0
    assert acc.answer(since=pd.Timestamp("2300-01-01").to_pydatetime())["all_time"]["scored"] == 0
    import datetime as dt

    for extreme in (
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=23))), dt.datetime.max,
        # any date a client sends
        dt.datetime(9999, 12, 31, tzinfo=dt.timezone(dt.timedelta(hours=-23))),
    ):
        assert acc.answer(since=extreme)["all_time"]["scored"] in (0, 60)


def test_rolling_window_is_the_latest_steps(tmp_path):
    df = goog()
    store = make_store(tmp_path / "store", 210)
    Ledger(tmp_path / "ledger", writer_id="gw1").record(records(df, range(150, 200)))
    acc, m = live(tmp_path, store, score_window_steps=30)
    acc.score_pass()
    body = acc.answer()
    assert body["all_time"]["scored"] == 150 and body["rolling"]["scored"] == 30
    assert body["window_steps"] == 30
    assert sample_value(m, "kronos_forecast_window_scored", {"model": "fake-model"}) == 30


def test_one_gateway_scores_at_a_time(tmp_path):
    store = make_store(tmp_path / "store", 200)
    Ledger(tmp_path / "ledger", writer_id="gw1").record(records(goog(), range(190, 199)))
    acc, _ = live(tmp_path, store)
    with scoring_lock(tmp_path / "ledger") as mine:  # another gateway's pass is running
        assert mine
        assert acc.score_pass() is None
    assert acc.score_pass()["scored"] > 0


def test_a_corrupt_ledger_file_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    df = goog()
    store = make_store(tmp_path / "store", 200)
    ledger = Ledger(tmp_path / "ledger", writer_id="gw1")
    ledger.record(records(df, range(190, 195)))
    bad = ledger.record(records(df, range(195, 197)))
    bad.write_bytes(b"PAR1 not really parquet")
    acc, m = live(tmp_path, store)
    with caplog.at_level(logging.WARNING):
        assert acc.score_pass()["scored"] == 5 * 3
        body = acc.answer()
    assert body["all_time"]["scored"] == 15
    assert any(bad.name in r.getMessage() for r in caplog.records)


def test_ledger_off_answer(tmp_path):
    from service.live_accuracy import ledger_off_answer

    s = Settings(ledger_dir="off")
    assert s.resolved_ledger_dir() is None
    body = AccuracyResponse.model_validate(ledger_off_answer(s, None, None, None, None))
    assert body.all_time.scored == 0 and "off" in body.detail
    default = Settings(store_dir=str(tmp_path / "s"))
    assert default.resolved_ledger_dir() == str(tmp_path / "s" / "_ledger")  # beside (in) the store


# ---------------------------------------------------------------- adaptive calibration


def aci_calibration(path: Path, horizon: int = 3) -> Calibration:
    """An ACI calibration of level 0.8 whose trailing scores say 'no correction' (zeros)."""
    levels, feats = (0.8,), ("open", "high", "low", "close")
    scores = np.zeros((20, 1, horizon, len(feats)))  # (W, C, H, F)
    state = aci.initial_state(scores, levels, gamma=0.05)
    cal = Calibration("aci", dict(MODEL), levels, feats, state.correction(), {}, state)
    cal.save(path)
    return Calibration.load(path)


class _Runner:
    """Stands for the replica's runner: what ``ReplicaCalibration.refresh`` sets on it."""

    calibration = None
    calibration_state = None

    def use_calibration(self, calibration, state):
        self.calibration, self.calibration_state = calibration, state


def test_scored_truths_move_the_aci_state_that_replicas_apply(tmp_path):
    df = goog()
    cal_path = tmp_path / "cal.json"
    cal = aci_calibration(cal_path)
    store = make_store(tmp_path / "store", 200)
    settings = dict(calibration=str(cal_path))
    s = Settings(store_dir=str(tmp_path / "store"), ledger_dir=str(tmp_path / "ledger"), **settings)
    replica = ReplicaCalibration(s, cal)
    runner = _Runner()
    before = replica.refresh(runner)
    assert before == {
        "method": "aci", "version": 0, "hash": corrections_hash(cal), "updated_at": None,
    }

    # bands far too narrow (0.1%): most truths fall outside -> ACI widens the correction
    stamp = CalibrationStamp("aci", 0, corrections_hash(cal), None)
    Ledger(tmp_path / "ledger", writer_id="gw1").record(
        records(df, range(170, 197), width=0.001, stamp=stamp)
    )
    adaptation = GatewayAdaptation.for_settings(s)
    assert adaptation is not None
    acc, _ = live(tmp_path, store, adaptation, **settings)
    done = acc.score_pass()
    assert done["adaptive"]["changed"] and done["adaptive"]["version"] == 1
    state_file = tmp_path / "ledger" / "calibration" / "cal.state.json"
    assert json.loads(state_file.read_text())["version"] == 1

    after = replica.refresh(runner)  # the replica's next batch
    assert after["version"] == 1 and after["hash"] != before["hash"] and after["updated_at"]
    close = cal.features.index("close")
    # wider
    assert (runner.calibration.corrections[0, :, close] > cal.corrections[0, :, close]).all()

    # a restart resumes the state from the file
    again = ReplicaCalibration(s, Calibration.load(cal_path))
    assert again.refresh(_Runner())["version"] == 1


def test_a_static_calibration_never_changes(tmp_path):
    cal_path = tmp_path / "cal.json"
    cal = aci_calibration(cal_path)
    static = Calibration("cqr", dict(MODEL), cal.levels, cal.features, cal.corrections)
    static.save(cal_path)
    s = Settings(
        store_dir=str(tmp_path / "store"), ledger_dir=str(tmp_path / "ledger"),
        calibration=str(cal_path),
    )
    assert GatewayAdaptation.for_settings(s) is None  # nothing is fed back
    replica = ReplicaCalibration(s, Calibration.load(cal_path))
    stamp = replica.refresh(_Runner())
    assert stamp["version"] == 0 and stamp["method"] == "cqr" and stamp["updated_at"] is None


def test_the_scoring_index_is_saved_after_the_first_pass_then_at_most_every_interval_and_at_stop(
    tmp_path, monkeypatch
):
    """Saving the index costs O(waiting files) (service.live_accuracy.INDEX_SAVE_INTERVAL_S), so a
    gateway saves it after its first pass, then only once the interval has passed, and when it
    stops; what a later start loads is what the last save held."""
    import service.live_accuracy as la
    from kronos_core.ledger.scoring import WaitingFiles

    df = goog()
    store = make_store(tmp_path / "store", 200)
    ledger = Ledger(tmp_path / "ledger", writer_id="gw1")
    ledger.record(records(df, range(180, 200)))
    acc, _ = live(tmp_path, store)
    index = acc.index_path

    acc.score_pass()
    first = WaitingFiles.load(index).waits
    assert first and first == acc.waiting.waits  # saved by the first pass
    ledger.record(records(df, range(190, 200)))  # a new file, waiting too
    acc.score_pass()
    assert len(acc.waiting.waits) == len(first) + 1
    assert WaitingFiles.load(index).waits == first  # within the interval: not saved again

    monkeypatch.setattr(la, "INDEX_SAVE_INTERVAL_S", 0.0)  # the interval has passed
    acc.score_pass()
    assert WaitingFiles.load(index).waits == acc.waiting.waits

    monkeypatch.setattr(la, "INDEX_SAVE_INTERVAL_S", 3600.0)
    ledger.record(records(df, range(195, 200)))
    acc.score_pass()
    assert len(WaitingFiles.load(index).waits) == len(acc.waiting.waits) - 1
    acc.stop()  # the gateway stops: what the passes learnt is kept
    assert WaitingFiles.load(index).waits == acc.waiting.waits
