"""Issue 26 item 5: `kronos eval --calibration F` scores the calibrated distribution (its corrected
paths and quantiles) beside the raw one, so a calibration's effect on CRPS and MASE shows.

Checked against the code before this change: there `metrics.crps` with a calibration equalled the
run without one (CRPS was scored from the raw paths), so the first assertion below failed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixture_paths import TINY

from kronos_core.cli import main

RUN = ["--lookback", "32", "--horizon", "2", "--sample-count", "8", "--model", TINY,
       "--device", "cpu"]


def test_eval_reports_raw_and_calibrated_crps_and_mase(unseen_csv, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--data", str(unseen_csv), "--windows", "30", "--end", "2026-12-01",
                 *RUN, "--out", str(cal)]) == 0
    close = json.loads(cal.read_text())["corrections"]["close"]  # {level: per step, log units}
    assert np.abs(np.array(list(close.values()))).max() > 1e-3  # it moves the bands
    plain, calibrated = tmp_path / "plain.json", tmp_path / "calibrated.json"
    data = ["--data", str(unseen_csv), "--windows", "6", *RUN]
    assert main(["eval", *data, "--out", str(plain)]) == 0
    assert main(["eval", *data, "--calibration", str(cal), "--out", str(calibrated)]) == 0
    text = capsys.readouterr().out
    p, c = json.loads(plain.read_text()), json.loads(calibrated.read_text())
    assert c["metrics"]["crps"] != pytest.approx(p["metrics"]["crps"], rel=1e-6)
    assert c["metrics_raw"]["crps"] == pytest.approx(p["metrics"]["crps"])  # raw: the plain run's
    assert c["metrics_raw"]["mase"] == pytest.approx(p["metrics"]["mase"])
    assert c["metrics"]["mase"] != pytest.approx(p["metrics"]["mase"], rel=1e-9)
    model = c["models"][0]
    assert model["calibration"] == str(cal) and model["calibration_method"] == "cqr"
    assert model["calibrated"]["2"]["crps"] == pytest.approx(c["metrics"]["crps"])
    assert model["metrics"]["2"]["crps"] == pytest.approx(c["metrics_raw"]["crps"])
    name = model["name"]
    assert f"| {name} (raw) |" in text and f"| {name} + calibration |" in text
    # the grouped table names the calibrated row and its file, the raw row says none
    assert f"| {name} + cqr calibration | cal.json |" in text and f"| {name} | none |" in text
    # the calibrated coverage comes from the corrected quantiles, as before
    assert c["metrics"]["coverage"] != p["metrics"]["coverage"]


def test_calibration_for_no_model_evaluated_is_refused(unseen_csv, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--data", str(unseen_csv), "--windows", "12", *RUN,
                 "--out", str(cal)]) == 0
    saved = json.loads(cal.read_text())
    saved["model"]["sha256"] = "0" * 64
    cal.write_text(json.dumps(saved))
    capsys.readouterr()
    rc = main(["eval", "--data", str(unseen_csv), "--windows", "2", *RUN,
               "--calibration", str(cal)])
    assert rc == 2 and "none of the models evaluated" in capsys.readouterr().err
