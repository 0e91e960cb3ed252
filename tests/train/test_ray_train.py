"""Ray Train: two CPU workers on a local Ray follow the single-process curve (slow: starts Ray)."""

from __future__ import annotations

import pytest
from train_helpers import tiny_overrides

from kronos_core.train.config import load_config
from kronos_core.train.metrics import read_metrics
from kronos_core.train.trainer import Trainer

EXTRA = {"max_steps": 3, "model.resid_dropout_p": 0.0}


@pytest.mark.slow
def test_two_ray_workers_train_like_one_process(tmp_path):
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.train.torch")
    from kronos_core.train.ray_backend import train_with_ray

    Trainer(load_config(None, tiny_overrides(tmp_path / "one", **EXTRA))).fit()
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        summary = train_with_ray(
            load_config(None, tiny_overrides(tmp_path / "ray", **EXTRA)), workers=2
        )
    finally:
        ray.shutdown()
    assert summary["steps"] == 3 and summary["backend"] == "ray"
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "ray")
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-5)
    assert (tmp_path / "ray" / "best" / "model" / "model.safetensors").is_file()
