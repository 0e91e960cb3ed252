"""Data-parallel training: two gloo processes with half the batch each follow one process with all
of it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
from train_helpers import REPO, tiny_overrides, write_config_yaml

from kronos_core.train.config import load_config
from kronos_core.train.metrics import read_metrics
from kronos_core.train.trainer import Trainer

EXTRA = {"max_steps": 4, "model.resid_dropout_p": 0.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cfg = load_config(None, tiny_overrides(out, **EXTRA))
    trainer = Trainer(cfg)
    assert trainer.dist.world == world and trainer.micro_batch_size == 4  # half of batch 8
    trainer.fit()


@pytest.mark.slow
def test_two_gloo_processes_follow_the_single_process_curve(tmp_path):
    single = Trainer(load_config(None, tiny_overrides(tmp_path / "one", **EXTRA)))
    single.fit()
    ctx = mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path / "two")), nprocs=2,
                             start_method="fork", join=False)
    while not ctx.join(timeout=300):
        pass
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [r["step"] for r in two] == [1, 2, 3, 4]
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-5)
    assert [r["val_loss"] for r in two if "val_loss" in r] == pytest.approx(
        [r["val_loss"] for r in one if "val_loss" in r], rel=1e-5)
    from kronos_core.model import Kronos

    ddp_model = Kronos.from_pretrained(tmp_path / "two" / "last" / "model")
    for a, b in zip(single.model.state_dict().values(), ddp_model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_torchrun_launch_matches_one_process(tmp_path):
    config = write_config_yaml(
        tmp_path / "tiny.yaml", tiny_overrides(tmp_path / "x", **EXTRA), skip=("out", "kind")
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    train = ["-m", "kronos_core.cli", "train", "predictor", "--config", str(config)]
    subprocess.run([sys.executable, *train, "--out", str(tmp_path / "one")], check=True, env=env,
                   capture_output=True, timeout=600)
    launch = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
        str(_free_port()),
    ]
    subprocess.run([*launch, *train, "--out", str(tmp_path / "two")], check=True, env=env,
                   capture_output=True, timeout=600)
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert len(two) == 4
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-5)
    assert load_config(tmp_path / "two" / "config.yaml").batch_size == 8
    import json

    assert json.loads((tmp_path / "two" / "summary.json").read_text())["world_size"] == 2
