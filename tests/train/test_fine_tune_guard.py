"""Fine-tuning cannot make a model worse silently: a run from a checkpoint trains at a
conservative learning rate unless told, scores forecasts (CRPS, MASE of the close on validation
windows) before and after, keeps the better weights in best/ and reports both figures."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from train_helpers import GOOG, REPO, write_config_yaml

from kronos_core.cli import main
from kronos_core.loading import DEFAULT_MODEL_DIR, PredictorConfig, resolve_source
from kronos_core.model.checkpoint import read_weights
from kronos_core.train.config import FINE_TUNE_LR, load_config
from kronos_core.train.forecast_check import decide, score_paths

TINY = REPO / "tests" / "fixtures" / "kronos-tiny"


def _args(out, init, *extra: str) -> list[str]:
    return ["train", "predictor", "--data", str(GOOG), "--lookback", "32", "--horizon", "8",
            "--batch-size", "8", "--eval-every", "2", "--save-every", "2", "--device", "cpu",
            "--threads", "1", "--init", str(init), "--out", str(out), *extra]


def _same_weights(a, b) -> bool:
    wa, wb = read_weights(a), read_weights(b)
    return wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


def test_a_huge_learning_rate_keeps_the_starting_weights_and_says_so(tmp_path, capsys):
    """The bundled (trained) model fine-tuned at lr 1e4 diverges; best/ holds its weights again."""
    out = tmp_path / "ft"
    assert main(_args(out, DEFAULT_MODEL_DIR, "--lr", "1e4", "--max-steps", "4")) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    check = summary["forecast_check"]
    before, after = check["before"], check["after"]
    assert summary["lr"] == 1e4 and check["metric"] == "crps_scaled"
    assert before["windows"] > 8 and before["paths"] == 16 and before["horizon"] == 5
    assert 0 < before["crps_scaled"] < before["mase"] < 5  # a trained model's figures
    assert after["crps_scaled"] is None or after["crps_scaled"] > before["crps_scaled"]
    assert check["kept"] == "init"
    if after["crps_scaled"] is not None:  # scored: the paired test says how sure it is
        test = check["test"]
        assert test["windows"] == before["windows"] and test["paths"] == 16
        assert test["p_value_worse"] < 0.05 and test["interval_95"][0] > 0
    assert _same_weights(out / "best" / "model", DEFAULT_MODEL_DIR / "model")
    assert not _same_weights(out / "last" / "model", DEFAULT_MODEL_DIR / "model")  # it did train
    # issue 44: the kept starting weights are marked, so they are never served under the new name
    manifest = json.loads((out / "best" / "kronos.json").read_text())
    assert manifest["step"] == 0 and manifest["source"] == "init" and manifest["kept"] == "init"
    assert manifest["name"] == "kronos-custom-kept-init"
    assert math.isfinite(manifest["val_loss"])
    assert summary["best"] == {"path": str(out / "best"), "step": 0, "kept": "init",
                               "val_loss": manifest["val_loss"], "source": "init",
                               "name": "kronos-custom-kept-init"}
    # what /v1/models, eval and backtest reports name: the loaded bundle's name
    assert resolve_source(PredictorConfig(model=str(out / "best"))).name == manifest["name"]
    assert json.loads((out / "forecast_check.json").read_text()) == check
    err = captured.err
    assert f"before  CRPS/scale {before['crps_scaled']:.4g}  MASE {before['mase']:.4g}" in err
    assert "kept the STARTING weights in best/, named kronos-custom-kept-init" in err


def test_keep_trained_keeps_the_trained_weights_and_still_reports_the_check(tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(_args(out, DEFAULT_MODEL_DIR, "--lr", "1e4", "--max-steps", "2",
                      "--keep-trained")) == 0
    captured = capsys.readouterr()
    check = json.loads(captured.out)["forecast_check"]
    assert check["kept"] == "trained" and check["keep_trained"] is True
    assert "keep_trained" in check["reason"]
    manifest = json.loads((out / "best" / "kronos.json").read_text())
    assert manifest["name"] == "kronos-custom" and "kept" not in manifest
    assert not _same_weights(out / "best" / "model", DEFAULT_MODEL_DIR / "model")


def test_the_default_learning_rate_of_a_fine_tune_is_conservative(tmp_path, capsys):
    assert main(_args(tmp_path / "a", TINY, "--max-steps", "2")) == 0
    assert json.loads(capsys.readouterr().out)["lr"] == FINE_TUNE_LR == 1e-4
    written = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert written["optim"]["lr"] == FINE_TUNE_LR
    assert main(_args(tmp_path / "b", TINY, "--max-steps", "2", "--lr", "0.003")) == 0
    assert json.loads(capsys.readouterr().out)["lr"] == 0.003  # --lr wins
    config = write_config_yaml(tmp_path / "c.yaml", {"optim.lr": 0.002})
    assert main([*_args(tmp_path / "c", TINY, "--max-steps", "2"), "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["lr"] == 0.002  # so does the config's optim.lr
    assert load_config(None, {}).optim.lr == 1e-3  # a run from scratch keeps the default


def test_a_resumed_run_compares_with_the_figures_of_the_starting_weights(tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(_args(out, TINY, "--max-steps", "2")) == 0
    first = json.loads(capsys.readouterr().out)["forecast_check"]["before"]
    assert main([*_args(out, TINY, "--max-steps", "4"), "--resume"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 4 and summary["forecast_check"]["before"] == first


def test_the_check_is_off_for_runs_from_scratch_and_can_be_turned_off(tmp_path, capsys):
    base = ["train", "predictor", "--data", str(GOOG), "--lookback", "32", "--horizon", "8",
            "--batch-size", "8", "--max-steps", "1", "--device", "cpu", "--threads", "1"]
    scratch = ["--out", str(tmp_path / "scratch"), "--tokenizer", str(TINY / "tokenizer")]
    assert main([*base, *scratch]) == 0
    assert json.loads(capsys.readouterr().out)["forecast_check"] is None
    config = write_config_yaml(tmp_path / "off.yaml", {"forecast_check.enabled": False})
    off = ["--out", str(tmp_path / "off"), "--init", str(TINY), "--config", str(config)]
    assert main([*base, *off]) == 0
    assert json.loads(capsys.readouterr().out)["forecast_check"] is None
    assert not (tmp_path / "off" / "forecast_check.json").exists()


def _figures(per_window, paths=16) -> dict:
    import numpy as np

    per = np.asarray(per_window, dtype=float)
    return {"crps_scaled": float(per.mean()), "mase": float(per.mean()) * 1.2, "windows": len(per),
            "paths": paths, "horizon": 5,
            "per_window": {"crps_scaled": list(per), "mase": list(per * 1.2)}}


def test_decide_puts_the_starting_weights_back_only_on_evidence():
    """Issue 44: 1.513 -> 1.551 on noisy windows is no evidence (the trained weights stay); a
    consistent loss on every window is, and the decision states its size and p-value."""
    import numpy as np

    rng = np.random.default_rng(0)
    before = rng.gamma(2.0, 0.75, 64)  # CRPS/scale of 64 windows, mean about 1.5
    noisy = before + rng.normal(0.04, 0.6, 64)  # a little worse on average, mostly noise
    d = decide(_figures(before), _figures(noisy), "crps_scaled")
    assert d["kept"] == "trained" and d["test"]["windows"] == 64 and d["test"]["paths"] == 16
    assert d["test"]["p_value_worse"] >= 0.05 and "no evidence" in d["reason"]
    lo, hi = d["test"]["interval_95"]
    assert lo < d["test"]["mean_difference"] < hi and lo < 0 < hi
    worse = before * 1.05 + 0.02  # worse on every window
    d = decide(_figures(before), _figures(worse), "crps_scaled")
    assert d["kept"] == "init" and d["test"]["p_value_worse"] < 1e-6
    assert d["test"]["interval_95"][0] > 0 and "64 windows x 16 paths" in d["reason"]
    better = decide(_figures(before), _figures(before * 0.9), "crps_scaled")
    assert better["kept"] == "trained" and better["test"]["p_value_worse"] > 0.99


def test_decide_counts_a_failed_forecast_as_worst():
    before = {"crps_scaled": 1.0, "mase": 1.2}
    assert decide(before, {"crps_scaled": None, "mase": None}, "crps_scaled")["kept"] == "init"
    assert decide(before, {"crps_scaled": float("nan"), "mase": 1.0},
                  "crps_scaled")["kept"] == "init"
    assert decide({"crps_scaled": None}, before, "crps_scaled")["kept"] == "trained"
    # figures without per-window losses (an older check file): the means decide, as before
    assert decide(before, {"crps_scaled": 0.9, "mase": 1.5}, "mase")["kept"] == "init"
    with pytest.raises(ValueError, match="unknown forecasting-check metric"):
        decide(before, before, "rmse")


def test_scores_by_hand():
    """One window, history close 10, 11, 12 (naive scale 1), truth 13, 14; three paths."""
    import numpy as np
    import pandas as pd

    from kronos_core.train.forecast_check import CheckWindows

    context = np.zeros((3, 6), np.float32)
    context[:, 3] = [10, 11, 12]
    truth = np.zeros((1, 2, 6), np.float32)
    truth[0, :, 3] = [13, 14]
    paths = np.zeros((1, 3, 2, 6), np.float32)
    # step 1: {11, 14, 14} around 13; step 2: all exact
    paths[0, :, :, 3] = [[11, 14], [14, 14], [14, 14]]
    stamps = pd.date_range("2024-01-01", periods=5, freq="D")
    w = CheckWindows([context], [stamps[:3]], [stamps[3:]], truth)
    figures = score_paths(paths, w)
    # fair CRPS step 1: E|X-y| = 4/3; the pairs i != j sum to 12 over 3*2 -> E|X-X'| = 2, half 1;
    # 4/3 - 1 = 1/3 (the plug-in form, dividing by 3*3, would give 2/3); step 2: 0.
    # Mean 1/6 over a scale of 1
    assert figures["crps_scaled"] == pytest.approx(1 / 6)
    assert figures["mase"] == pytest.approx(0.0)  # the mean path is 13, 14
    assert figures["naive_mase"] == pytest.approx(1.5)  # 12 against 13 and 14
