"""Adaptive calibration online: the scored forecasts continue an ACI calibration's walk,
the state persists across a reload, a static calibration never changes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from ledger_helpers import SHA, candles, make_store

from kronos_core.calibration.conformal import Calibration, conformity_scores
from kronos_core.ledger import ForecastRecord, Ledger, OnlineCalibration, corrections_hash, score
from kronos_core.ledger.errors import StateError

H = 3
LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)  # quantiles: central 0.5, 0.8, 0.9 at both ends
CLOSE = 3


def _paths(rng, n, last, s=64, sigma=0.01):
    """Sample paths (n, S, H, 6) around ``last`` (n,), every feature the close."""
    steps = rng.normal(0, sigma, (n, s, H))
    close = last[:, None, None] * np.exp(np.cumsum(steps, axis=2))  # (n, S, H)
    return np.repeat(close[..., None], 6, axis=3)


def _fitted(method="aci", seed=0):
    rng = np.random.default_rng(seed)
    n = 40
    last = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    samples = _paths(rng, n, last)
    truth = np.repeat(
        (last[:, None] * np.exp(np.cumsum(rng.normal(0, 0.012, (n, H)), axis=1)))[..., None], 6,
        axis=2,
    )
    issued = np.arange(n)
    return Calibration.fit(
        samples, truth, (0.5, 0.8, 0.9), {"sha256": SHA, "name": "m"}, method=method,
        features=("close",), issued=issued, resolved=issued + H,
    )


def _forecast_round(online, frame, origins, rng, request_id):
    """Records of forecasts at ``origins`` (row numbers of ``frame``) corrected by the
    calibration ``online`` applies now, and their raw sample paths (n, S, H, 6)."""
    cal = online.calibration
    last = frame.close.to_numpy()[origins]
    samples = _paths(rng, len(origins), last)
    # (Q, n, H) corrected, as a replica answers
    q = cal.quantiles(samples[..., CLOSE], LEVELS, "close")
    recs = []
    for k, o in enumerate(origins):
        steps = frame.timestamps.iloc[o + 1: o + 1 + H]
        recs.append(
            ForecastRecord(
                request_id=f"{request_id}-{k}", symbol="AAA", origin=frame.timestamps.iloc[o],
                timestamps=list(steps), mean={"close": samples[k, :, :, CLOSE].mean(axis=0)},
                quantiles={lv: {"close": q[i, k]} for i, lv in enumerate(LEVELS)}, model_sha256=SHA,
                calibration=online.stamp, frequency="1d",
            )
        )
    return recs, samples


def test_aci_state_follows_the_scored_forecasts_and_persists(tmp_path):
    cal = _fitted()
    state_path = tmp_path / "ledger" / "calibration" / "cal.state.json"
    online = OnlineCalibration(cal, state_path)
    assert (
        online.adaptive and online.stamp.version == 0 and online.stamp.hash == corrections_hash(cal)
    )
    assert online.stamp.updated_at is None
    frame = candles(60, seed=5)
    store = make_store(tmp_path / "store", {"AAA": frame.iloc[:20]})
    led = Ledger(tmp_path / "ledger")
    rng = np.random.default_rng(1)
    direct = cal.state.copy()  # the same walk done by hand with aci's own update
    for r, origins in enumerate((np.arange(10, 16), np.arange(22, 28))):
        corr_issued = online.calibration.corrections.copy()  # (C, H, 1)
        recs, samples = _forecast_round(online, frame, origins, rng, f"round{r}")
        led.record(recs)
        store.write("AAA", frame.iloc[: origins[-1] + H + 1], frequency="1d", on_overlap="keep")
        store.clear_cache()
        res = score(led, store)
        assert res.scores.num_rows == len(origins) * H
        result = online.update(res.scored)
        assert result.changed and result.version == r + 1 and result.steps == len(origins) * H
        truth = np.repeat(
            np.stack([frame.close.to_numpy()[o + 1 : o + 1 + H] for o in origins])[..., None], 6,
            axis=2,
        )
        raw = conformity_scores(samples, truth, cal.levels, [CLOSE], "cqr")  # (n, C, H, 1)
        for k in range(len(origins)):
            direct.update(raw[k], corr_issued)
        np.testing.assert_allclose(online.calibration.state.alpha, direct.alpha, atol=1e-12)
        np.testing.assert_allclose(online.calibration.state.scores, direct.scores, atol=1e-9)
        np.testing.assert_allclose(online.calibration.corrections, direct.correction(), atol=1e-9)
    assert online.stamp.version == 2 and online.stamp.updated_at is not None
    assert online.stamp.hash == corrections_hash(online.calibration) != corrections_hash(cal)
    # a restart (or another gateway) resumes the persisted state
    again = OnlineCalibration(cal, state_path)
    assert again.stamp == online.stamp
    np.testing.assert_allclose(again.calibration.corrections, online.calibration.corrections)
    doc = json.loads(state_path.read_text())
    assert doc["version"] == 2 and doc["hash"] == online.stamp.hash
    # the corrections issued by every state are kept, found by the rows' calibration_hash
    assert (state_path.parent / "cal.state.json.d" / f"{online.stamp.hash}.npy").exists()
    # an update by another writer is seen by refresh
    assert not again.refresh()
    assert online.update(res.scored.slice(0, 0)).changed is False


def test_steps_of_another_calibration_are_left_out(tmp_path):
    cal = _fitted()
    online = OnlineCalibration(cal, tmp_path / "s.json")
    frame = candles(40, seed=2)
    store = make_store(tmp_path / "store", {"AAA": frame})
    led = Ledger(tmp_path / "ledger")
    recs, _ = _forecast_round(online, frame, np.arange(10, 14), np.random.default_rng(0), "x")
    for r in recs:
        r.calibration = None  # uncalibrated answers
    led.record(recs)
    res = score(led, store)
    assert res.scored.num_rows == 12
    out = online.update(res.scored)
    assert not out.changed and out.steps == 0 and not (tmp_path / "s.json").exists()


def test_static_calibration_never_changes(tmp_path):
    cal = _fitted("cqr")
    online = OnlineCalibration(cal, tmp_path / "s.json")
    assert not online.adaptive
    frame = candles(40, seed=3)
    store = make_store(tmp_path / "store", {"AAA": frame})
    led = Ledger(tmp_path / "ledger")
    before = cal.corrections.copy()
    recs, _ = _forecast_round(online, frame, np.arange(10, 14), np.random.default_rng(0), "x")
    led.record(recs)
    out = online.update(score(led, store).scored)
    assert not out.changed and out.version == 0
    np.testing.assert_array_equal(online.calibration.corrections, before)
    assert online.calibration is cal and not (tmp_path / "s.json").exists()
    assert (
        online.stamp.method == "cqr"
        and online.stamp.version == 0
        and online.stamp.hash == corrections_hash(cal)
    )


def test_a_damaged_state_file_is_named(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(StateError, match=str(path)):
        OnlineCalibration(_fitted(), path)


def test_a_state_of_another_fit_is_not_applied(tmp_path):
    path = tmp_path / "s.json"
    first = OnlineCalibration(_fitted(seed=0), path)
    frame = candles(40, seed=2)
    store = make_store(tmp_path / "store", {"AAA": frame})
    led = Ledger(tmp_path / "ledger")
    recs, _ = _forecast_round(first, frame, np.arange(10, 14), np.random.default_rng(0), "x")
    led.record(recs)
    assert first.update(score(led, store).scored).changed
    refit = _fitted(seed=1)
    other = OnlineCalibration(refit, path)
    assert other.stamp.version == 0
    np.testing.assert_array_equal(other.calibration.corrections, refit.corrections)


def test_open_from_files(tmp_path):
    cal = _fitted()
    p = cal.save(tmp_path / "cal.json")
    online = OnlineCalibration.open(p, ledger_root=tmp_path / "ledger")
    assert online.state_path == tmp_path / "ledger" / "calibration" / "cal.state.json"
    assert online.adaptive and online.stamp.version == 0
    assert pd.isna(None) and OnlineCalibration.open(p).adaptive is False


def test_two_gateways_share_one_state(tmp_path):
    """Each update starts from the latest state on disk, whoever wrote it."""
    cal = _fitted()
    path = tmp_path / "state.json"
    a, b = OnlineCalibration(cal, path), OnlineCalibration(cal, path)
    frame = candles(60, seed=4)
    store = make_store(tmp_path / "store", {"AAA": frame})
    led = Ledger(tmp_path / "ledger")
    rng = np.random.default_rng(3)
    recs, _ = _forecast_round(a, frame, np.arange(10, 14), rng, "a")
    led.record(recs)
    first = score(led, store)
    assert a.update(first.scored).version == 1
    recs, _ = _forecast_round(a, frame, np.arange(20, 24), rng, "b")  # issued with a's new state
    led.record(recs)
    second = score(led, store)
    assert b.stamp.version == 0  # b has not looked yet
    assert b.update(second.scored).version == 2  # starts from a's version 1
    alone = OnlineCalibration(cal, tmp_path / "alone.json")
    alone.update(first.scored)
    # the history of a's state is found beside the shared file, not beside alone's: copy it
    import shutil

    shutil.copytree(
        path.with_name(path.name + ".d"), (tmp_path / "alone.json.d"), dirs_exist_ok=True
    )
    alone.update(second.scored)
    np.testing.assert_allclose(b.calibration.corrections, alone.calibration.corrections)
    assert a.refresh() and a.stamp == b.stamp


def test_old_states_corrections_are_pruned(tmp_path):
    import os

    cal = _fitted()
    path = tmp_path / "state.json"
    online = OnlineCalibration(cal, path, history_days=1)
    frame = candles(40, seed=2)
    store = make_store(tmp_path / "store", {"AAA": frame})
    led = Ledger(tmp_path / "ledger")
    history = path.with_name(path.name + ".d")
    history.mkdir()
    old = history / ("0" * 64 + ".npy")
    old.write_bytes(b"x")
    os.utime(old, (1, 1))
    recs, _ = _forecast_round(online, frame, np.arange(10, 14), np.random.default_rng(0), "x")
    led.record(recs)
    assert online.update(score(led, store).scored).changed
    assert not old.exists()
    assert {p.stem for p in history.glob("*.npy")} == {corrections_hash(cal), online.stamp.hash}
