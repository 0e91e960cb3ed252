"""Training says what it did: the number of training and validation windows, the files it
wrote and the best checkpoint (path, step, validation loss), printed and in summary.json."""

from __future__ import annotations

import json

from train_helpers import GOOG, tiny_overrides, write_config_yaml

from kronos_core.cli import main
from kronos_core.train.config import load_config
from kronos_core.train.data import load_series, split_windows


def test_the_end_of_a_run_says_windows_files_and_best_checkpoint(tmp_path, capsys):
    overrides = tiny_overrides(tmp_path / "unused", **{"max_steps": 6, "eval_every": 2})
    config = write_config_yaml(tmp_path / "tiny.yaml", overrides,
                               skip=("out", "kind", "data.paths"))
    out = tmp_path / "run"
    assert main(["train", "predictor", "--config", str(config), "--data", str(GOOG),
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)

    # the window counts, against the data cut independently of the run
    cfg = load_config(None, {**overrides, "out": str(out)})
    train_idx, val_idx = split_windows(load_series(cfg.data), cfg.data)
    assert (summary["train_windows"], summary["val_windows"]) == (len(train_idx), len(val_idx))
    assert len(val_idx) > 0

    # the best checkpoint: the evaluation with the lowest validation loss
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if r.get("val_loss") is not None]
    best = min(evals, key=lambda r: r["val_loss"])
    assert summary["best"] == {"path": str(out / "best"), "step": best["step"],
                               "val_loss": best["val_loss"], "source": "trained",
                               "name": "kronos-custom", "kept": None}
    assert json.loads((out / "best" / "kronos.json").read_text())["step"] == best["step"]

    # the files: exactly what is in the folder
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert summary["files"] == on_disk
    assert {"best/model/model.safetensors", "last/trainer_state.pt", "summary.json",
            "metrics.jsonl", "config.yaml"} <= set(on_disk)
    assert json.loads((out / "summary.json").read_text())["files"] == on_disk

    err = captured.err
    assert (f"trained 6 steps on {len(train_idx)} training windows ({len(val_idx)} validation "
            "windows)") in err
    assert (f"best checkpoint: {out / 'best'} (step {best['step']}, validation loss "
            f"{best['val_loss']:.4g}, trained weights)") in err
    assert f"files written in {out}:" in err
    assert "  best/ kronos.json model/config.json model/model.safetensors" in err
    assert "forecasting check" not in err  # a run from scratch has no starting weights to beat
