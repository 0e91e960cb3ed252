"""``kronos train ... --backend ray``: the same training loop under Ray Train's ``TorchTrainer``.

Ray starts ``workers`` processes (one GPU each with ``use_gpu``), sets up the
torch process group and runs ``Trainer`` in each; rank 0 writes the output folder.
On the serving cluster this trains where the model is served (see
``deploy/kuberay-rayjob.yaml``). Ray is imported only when this path runs.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from kronos_core.train.config import TrainConfig

log = logging.getLogger(__name__)


def _absolute(cfg: TrainConfig) -> TrainConfig:
    """Paths made absolute: Ray workers run in their own working directory."""
    data = cfg.data.model_copy(update={
        "paths": [str(Path(p).resolve()) for p in cfg.data.paths],
        "store": str(Path(cfg.data.store).resolve()) if cfg.data.store else None,
    })

    def local(p: str | None) -> str | None:
        return str(Path(p).resolve()) if p and Path(p).exists() else p  # Hub ids stay as they are

    return cfg.model_copy(
        update={
            "out": str(Path(cfg.out).resolve()), "data": data, "init": local(cfg.init),
            "tokenizer_init": local(cfg.tokenizer_init),
        }
    )


def _worker_loop(config: dict) -> None:
    """Runs in every Ray Train worker."""
    import ray.train

    from kronos_core.train.trainer import Trainer

    context = ray.train.get_context()
    os.environ["LOCAL_RANK"] = str(context.get_local_rank())
    cfg = TrainConfig.model_validate(config["cfg"])
    summary = Trainer(cfg, resume=config["resume"]).fit()
    ray.train.report(
        {k: v for k, v in summary.items() if isinstance(v, (int, float, bool)) and v is not None}
    )


def train_with_ray(cfg: TrainConfig, workers: int = 2, use_gpu: bool = False, resume: bool = False,
                   address: str | None = None) -> dict:
    """Train with ``workers`` Ray Train workers; returns rank 0's summary."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    cfg = _absolute(cfg)
    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 log_to_driver=True)
    trainer = TorchTrainer(
        _worker_loop,
        # only the fields the user set: the others (max_context, ...) stay the init checkpoint's
        train_loop_config={
            "cfg": cfg.model_dump(mode="json", exclude_unset=True), "resume": resume,
        },
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(name="kronos-train", storage_path=str(Path(cfg.out) / "ray")),
    )
    trainer.fit()
    from kronos_core.train.trainer import SUMMARY_FILE

    summary = json.loads((Path(cfg.out) / SUMMARY_FILE).read_text())  # written by rank 0
    summary.update(backend="ray", workers=workers)
    return summary
