"""``kronos train predictor --minutes N`` (issue 44): the run stops at the wall-clock cap with a
checkpoint in last/ that loads and forecasts, and ``--resume`` continues it. The user's case is
``--minutes 5``; the test uses 0.05 minutes (3 s) of a tiny config, and the same rule: stop at
the first step past the cap, at most a minute late (the acceptance's margin)."""

from __future__ import annotations

import json

import pandas as pd
from train_helpers import GOOG, tiny_overrides, write_config_yaml

from kronos_core.cli import main

CAP_MIN = 0.05


def _config(tmp_path) -> str:
    overrides = tiny_overrides(tmp_path / "x", max_steps=100_000, eval_every=5, save_every=1000)
    return str(write_config_yaml(tmp_path / "tiny.yaml", overrides,
                                 skip=("out", "kind", "data.paths")))


def test_minutes_stops_at_the_cap_with_a_checkpoint_that_resume_continues(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "predictor", "--config", _config(tmp_path), "--data", str(GOOG),
            "--out", str(out), "--minutes", str(CAP_MIN)]
    assert main(args) == 0
    captured = capsys.readouterr()
    first = json.loads(captured.out)
    assert first["stopped_for_time"] is True and 0 < first["steps"] < 100_000
    assert CAP_MIN * 60 <= first["seconds"] < CAP_MIN * 60 + 60  # timing-ok: the cap, 1 min grace
    assert "--resume" in captured.err  # the report says how to go on
    last = json.loads((out / "last" / "kronos.json").read_text())
    assert last["step"] == first["steps"]  # the checkpoint is the step it stopped at

    from kronos_core import KronosPredictor
    from kronos_core.model import Kronos, KronosTokenizer

    predictor = KronosPredictor(Kronos.from_pretrained(out / "last" / "model"),
                                KronosTokenizer.from_pretrained(out / "last" / "tokenizer"),
                                device="cpu", max_context=64)
    hist = pd.read_csv(GOOG, parse_dates=["timestamps"]).iloc[:40]
    future = pd.Series(pd.date_range(hist["timestamps"].iloc[-1], periods=4, freq="D")[1:])
    pred = predictor.predict(hist.drop(columns="timestamps"), hist["timestamps"], future,
                             pred_len=3, top_k=1, verbose=False)
    assert pred.shape == (3, 6) and pred.notna().all().all()

    assert main([*args, "--resume"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["stopped_for_time"] is True and second["steps"] > first["steps"]
    steps = [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if "loss" in r]
    assert steps == sorted(steps) and steps[-1] == second["steps"]
    assert len(set(steps)) == len(steps)  # continued, not restarted from step 1
