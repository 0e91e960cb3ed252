"""A calibration records where it was fitted (lookback, bar frequency, series or groups) and
applies only there: ``Calibration.covers`` says why not; files fitted per group; older files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY

from kronos_core.calibration.conformal import Calibration, CalibrationError, Scope
from kronos_core.cli import main

MODEL = {"name": "m", "sha256": "a" * 64}


def _cal(horizon=5, levels=(0.5, 0.8, 0.9), scope=Scope()) -> Calibration:
    rng = np.random.default_rng(0)
    paths = 100 * np.exp(rng.normal(0, 0.01, size=(40, 16, horizon, 6)))
    truth = 100 * np.exp(rng.normal(0, 0.02, size=(40, horizon, 6)))
    return Calibration.fit(paths, truth, levels, MODEL, "cqr", scope=scope)


def test_covers_says_why_not():
    cal = _cal(scope=Scope((128, 128), ("1d",), ("GOOG", "SPX")))
    assert cal.covers(5, (0.1, 0.5, 0.9), 128, "1d") is None
    assert cal.covers(3, (0.05, 0.95), 128, "1d") is None
    assert cal.covers(8, (0.1, 0.9), 128, "1d") == "fitted for horizon 5, asked 8"
    assert cal.covers(5, (0.1, 0.9), 507, "1d") == "fitted for lookback 128, asked 507"
    assert cal.covers(5, (0.1, 0.9), 128, "1h") == "fitted on 1d bars, asked 1h"
    assert "0.98" in cal.covers(5, (0.01, 0.99), 128, "1d")
    assert cal.covers(5, (0.1, 0.9)) is None  # what the request does not say is not checked


def test_files_without_a_scope_keep_today_s_rule(tmp_path):
    """An older file (no scope fields) loads; only horizon and levels are checked."""
    d = _cal().to_dict()
    del d["scope"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    old = Calibration.load(path)
    assert old.scope == Scope()
    assert old.covers(5, (0.1, 0.9), 507, "1h") is None
    assert old.covers(6, (0.1, 0.9), 507, "1h") == "fitted for horizon 5, asked 6"


def test_scope_round_trips(tmp_path):
    cal = _cal(scope=Scope((64, 128), ("1d", "1h"), ("A",)))
    back = Calibration.load(cal.save(tmp_path / "c.json"))
    assert back.scope == cal.scope
    assert back.covers(5, (0.1, 0.9), 96, "1h") is None
    assert back.covers(5, (0.1, 0.9), 32, "1h") == "fitted for lookback 64-128, asked 32"


def test_one_file_per_group_applies_each_where_it_was_fitted(tmp_path):
    daily = _cal(scope=Scope((128, 128), ("1d",), ("GOOG",)))
    hourly = _cal(horizon=3, scope=Scope((128, 128), ("1h",), ("EURUSD",)))
    whole = Calibration.grouped({"1d": daily, "1h": hourly}, "frequency")
    back = Calibration.load(whole.save(tmp_path / "g.json"))
    assert list(back.members) == ["1d", "1h"] and back.group_by == "frequency"
    assert back.covers(5, (0.1, 0.9), 128, "1d") is None
    assert back.covers(5, (0.1, 0.9), 128, "1h") == "fitted for horizon 3, asked 5"
    assert (
        back.covers(3, (0.1, 0.9), 128, "5min") == "no group for frequency 5min; fitted for 1d, 1h"
    )
    np.testing.assert_array_equal(back.select("1h").corrections, hourly.corrections)
    with pytest.raises(CalibrationError, match="per frequency"):
        back.quantiles(np.ones((1, 4, 3)), [0.1, 0.9])  # a grouped file: pick the group first


def _frame(stamps: pd.DatetimeIndex, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(stamps))))
    return pd.DataFrame(
        {
            "timestamps": stamps, "open": close, "high": close * 1.01, "low": close * 0.99,
            "close": close, "volume": 1000.0,
        }
    )


def test_calibrate_per_frequency_into_one_file_then_eval_checks_the_scope(tmp_path, capsys):
    days = pd.bdate_range("2020-01-01", periods=160)
    hours = pd.date_range("2020-01-06", periods=160, freq="h")
    files = []
    for name, stamps, seed in (("daily", days, 0), ("hourly", hours, 1)):
        files.append(str(tmp_path / f"{name}.csv"))
        _frame(stamps, seed).to_csv(files[-1], index=False)
    model = ["--model", TINY, "--device", "cpu", "--sample-count", "2"]
    cal = tmp_path / "cal.json"
    assert (
        main(
            [
                "calibrate", "--data", *files, "--lookback", "32", "--horizon", "2", "--windows",
                "12", "--group-by", "frequency", "--out", str(cal), *model,
            ]
        )
        == 0
    )
    assert "one calibration per frequency: 1d, 1h" in capsys.readouterr().out
    saved = json.loads(cal.read_text())
    assert saved["group_by"] == "frequency" and set(saved["groups"]) == {"1d", "1h"}
    assert saved["groups"]["1h"]["scope"] == {
        "lookback": [32, 32], "frequencies": ["1h"], "series": ["hourly"],
    }
    loaded = Calibration.load(cal)
    assert loaded.covers(2, (0.1, 0.9), 32, "1h") is None
    assert loaded.covers(2, (0.1, 0.9), 64, "1h") == "fitted for lookback 32, asked 64"
    window = ["--horizon", "2", "--windows", "2", "--calibration", str(cal), *model]
    assert main(["eval", "--data", files[1], "--lookback", "32", *window]) == 0
    capsys.readouterr()
    assert main(["eval", "--data", files[1], "--lookback", "48", *window]) == 2
    assert "does not apply to hourly: fitted for lookback 32, asked 48" in capsys.readouterr().err


def test_forecast_applies_a_calibration_only_in_its_scope_and_summarises_as_the_bands(
    tmp_path, capsys, caplog
):
    import logging

    path = tmp_path / "daily.csv"
    frame = _frame(pd.bdate_range("2020-01-01", periods=160), 3)
    frame.to_csv(path, index=False)
    model = ["--model", TINY, "--device", "cpu"]
    cal = tmp_path / "cal.json"
    assert (
        main(
            [
                "calibrate", "--data", str(path), "--lookback", "32", "--horizon", "2", "--windows",
                "12", "--sample-count", "4", "--out", str(cal), *model,
            ]
        )
        == 0
    )
    capsys.readouterr()
    args = ["forecast", "--csv", str(path), "--horizon", "2", "--samples", "100", "--seed", "1",
            "--quantiles", "0.05,0.95", "--summary", "--calibration", str(cal), *model]
    assert main([*args, "--lookback", "32"]) == 0
    text = capsys.readouterr().out
    table = [line.split() for line in text.splitlines() if line.startswith("2020-")]
    header = next(line.split() for line in text.splitlines() if "close_q0.05" in line)
    q05 = float(table[-1][1 + header.index("close_q0.05")])  # the row starts with the date
    var_95 = float(text.split("var_95=")[1].split(",")[0])
    last = float(frame["close"].iloc[-1])
    assert var_95 == pytest.approx(1 - q05 / last, abs=0.01)  # the summary agrees with the bands
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--lookback", "160"]) == 0  # all 160 rows, not the calibration's 32
    assert "not applied: fitted for lookback 32, asked 160" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # no lookback asked: the calibration's own (issue 26)
        assert main(args) == 0
    assert "not applied" not in caplog.text
