"""Resume after a kill: model, optimiser, scheduler, RNG and data position continue exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from train_helpers import REPO, tiny_overrides, write_config_yaml

from kronos_core.train.config import load_config
from kronos_core.train.metrics import read_metrics
from kronos_core.train.trainer import Trainer

DROPOUT = {"model.resid_dropout_p": 0.2, "model.ffn_dropout_p": 0.2}  # the RNG matters


def _same_curve(a, b) -> None:
    ra, rb = read_metrics(a), read_metrics(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(1, len(rb) + 1))
    assert [r["loss"] for r in ra] == pytest.approx([r["loss"] for r in rb], rel=1e-6)


def test_interrupted_run_resumes_on_the_same_curve(tiny_config, tmp_path):
    # 24 windows / batch 8 = 3 steps per epoch: the kill lands inside the second epoch
    extra = {"max_steps": 7, "save_every": 2, "data.stride": 64, **DROPOUT}
    whole = Trainer(tiny_config(out=tmp_path / "whole", **extra))
    whole.fit()
    assert len(whole.train_set) // 8 == 3

    cfg = tiny_config(out=tmp_path / "cut", **extra)
    cut = Trainer(cfg)
    step = cut.train_step

    def killed_at_5(batch):
        if cut.step == 4:
            raise KeyboardInterrupt("simulated kill")
        return step(batch)

    cut.train_step = killed_at_5
    with pytest.raises(KeyboardInterrupt):
        cut.fit()
    resumed = Trainer(cfg, resume=True)
    assert (resumed.step, resumed.epoch, resumed.position) == (4, 1, 1)
    resumed.fit()
    _same_curve(tmp_path / "cut", tmp_path / "whole")


def test_resume_without_state_says_so(tiny_config, tmp_path):
    with pytest.raises(FileNotFoundError, match="without --resume"):
        Trainer(tiny_config(out=tmp_path / "none"), resume=True)


@pytest.mark.slow
def test_sigkill_then_resume_from_the_command_line(tmp_path):
    base = {k: v for k, v in tiny_overrides(tmp_path / "x").items() if k not in ("out", "kind")}
    base.update({"max_steps": 8, "save_every": 1, "data.num_workers": 1, **DROPOUT})
    config = write_config_yaml(tmp_path / "tiny.yaml", base)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cmd(out, *more):
        return [
            sys.executable, "-m", "kronos_core.cli", "train", "predictor", "--config", str(config),
            "--out", str(out), *more,
        ]

    subprocess.run(cmd(tmp_path / "whole"), check=True, env=env, capture_output=True, timeout=600)
    proc = subprocess.Popen(
        cmd(tmp_path / "cut"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 300
    while len(read_metrics(tmp_path / "cut")) < 4 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(read_metrics(tmp_path / "cut"))
    assert 4 <= done < 8, "the run finished before it could be killed"
    subprocess.run(
        cmd(tmp_path / "cut", "--resume"), check=True, env=env, capture_output=True, timeout=600
    )
    _same_curve(tmp_path / "cut", tmp_path / "whole")
    assert load_config(tmp_path / "cut" / "config.yaml").max_steps == 8
