"""``kronos train bench --compare-threads 1 2`` (issue 44): seconds per step at each thread count,
each in a fresh process, alternating rounds, with the medians and their ratio. Only what it
prints is checked here; the figures of this machine are in docs/training.md."""

from __future__ import annotations

import json

from train_helpers import GOOG, tiny_overrides, write_config_yaml

from kronos_core.cli import main


def test_compare_threads_prints_both_counts(tmp_path, capsys):
    config = write_config_yaml(tmp_path / "tiny.yaml", tiny_overrides(tmp_path / "x"),
                               skip=("out", "kind", "data.paths", "threads"))
    assert main(["train", "bench", "--config", str(config), "--data", str(GOOG), "--steps", "1",
                 "--compare-threads", "1", "2", "--rounds", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])
    assert set(figures["step_s"]) == {"1", "2"} and all(
        len(v) == 2 and all(s > 0 for s in v) for v in figures["step_s"].values())
    for t in ("1", "2"):
        assert sorted(figures["step_s"][t])[0] <= figures["median_step_s"][t]
    assert "round 2: threads 2:" in out and "x threads 1" in out
