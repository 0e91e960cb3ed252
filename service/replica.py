"""The predictor replica: a Ray Serve deployment that owns one device, loads the model
once, and coalesces shards from concurrent requests into device batches (``@serve.batch``,
list in / list out) within a token budget. Out-of-memory splitting is in ``service.batch_runner.BatchRunner``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ray import serve

from service.batch_runner import BatchRunner
from service.messages import BatchReport, ReplicaInfo, Shard, ShardResult
from service.settings import Settings

log = logging.getLogger(__name__)

CPU_DEFAULT_BUDGET = 2 << 30  # bytes a CPU replica plans one batch for


@dataclass
class InjectedFaults:
    """Faults a test injects into one replica process; nothing in the service sets them.
    ``shard_delay_s``: every shard received waits this long before it joins a batch (a slow
    replica; cancellable, and clearing it releases the shards already waiting)."""

    shard_delay_s: float = 0.0


FAULTS = InjectedFaults()


def inject_fault(_actor: Any = None, shard_delay_s: float | None = None, exit_after_s: float | None = None) -> dict:
    """Test-only hook, run inside one replica's process through Ray's ``__ray_call__`` on its
    actor (``ray.get(actor.__ray_call__.remote(inject_fault, shard_delay_s=30))``); never
    reachable over HTTP. ``exit_after_s``: the process exits that many seconds later, as a crash
    would (``os._exit``, no clean-up). Returns the faults now set."""
    faults = _faults()
    if shard_delay_s is not None:
        faults.shard_delay_s = float(shard_delay_s)
    if exit_after_s is not None:
        log.warning("test fault: replica process %d exits in %.3g s", os.getpid(), exit_after_s)
        threading.Timer(exit_after_s, os._exit, (1,)).start()
    return {"shard_delay_s": faults.shard_delay_s, "pid": os.getpid()}


def _faults() -> InjectedFaults:
    """This process's ``FAULTS``, through the module (the replica class may be a pickled copy)."""
    import service.replica

    return service.replica.FAULTS


async def _test_delay() -> None:
    start = time.monotonic()
    while time.monotonic() - start < _faults().shard_delay_s:
        await asyncio.sleep(0.05)


def _shard_tokens(shards: list[Shard]) -> int:
    return sum(s.tokens for s in shards)


def load_calibration(path: str, identity):
    """The calibration file, refused (``CalibrationMismatch``) unless fitted for ``identity``."""
    from kronos_core.eval.calibration import Calibration

    cal = Calibration.load(path)
    cal.check_model(identity)
    return cal


def calibration_info(cal) -> dict[str, Any]:
    """What answers say about the calibration: the model it was fitted for and what it covers."""
    # method, levels, horizon, features, scope (and groups): the gateway decides per series with it
    return {"model_name": cal.model.get("name"), "model_sha256": cal.model.get("sha256"), **cal.describe()}


def model_info(identity, max_context: int, cfg) -> dict[str, Any]:
    """The model block of ``/v1/models`` and every forecast response: identity, no server paths."""
    info = identity.as_dict()
    info["max_context"] = max_context
    info["dtype"] = cfg.dtype
    info["sliding"] = cfg.sliding
    info["compile"] = cfg.compile
    info["calibration"] = None
    if identity.random_weights:
        info["note"] = ("RANDOM weights: forecasts are not meaningful; set KRONOS_MODEL_DIR (or --model-dir) "
                        "to a trained checkpoint")
    return info


@serve.deployment(name="Predictor", health_check_period_s=5, health_check_timeout_s=30)
class Predictor:
    def __init__(self, settings: Settings):
        import torch

        from kronos_core.loading import load_predictor

        self.settings = settings
        try:
            self.replica_id = serve.get_replica_context().replica_id.unique_id
        except Exception:  # outside Serve (unit use)
            self.replica_id = f"local-{os.getpid()}"
        if settings.device != "cpu" and torch.cuda.is_available():
            self.device = "cuda:0"  # Ray sets CUDA_VISIBLE_DEVICES to this replica's GPU
        else:
            self.device = "cpu"
            threads = int(settings.replica_cpus or 0) or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
            if threads > 0:
                torch.set_num_threads(threads)
        self.predictor_config = settings.predictor_config(device=self.device)
        self.predictor = load_predictor(self.predictor_config)
        self.max_context = self.predictor.max_context
        self.model_cfg = self.predictor.model.config
        self.tokenizer_cfg = self.predictor.tokenizer.config
        self.model = model_info(self.predictor.identity, self.max_context, self.predictor_config)
        if settings.device_budget_bytes:
            self.budget = int(settings.device_budget_bytes)
        elif self.device.startswith("cuda"):
            free, _total = torch.cuda.mem_get_info()
            self.budget = int(free * 0.9)
        else:
            self.budget = CPU_DEFAULT_BUDGET
        self.runner = BatchRunner(self.predictor, self.replica_id, self.device)
        self.adaptive = None  # service.adaptive.ReplicaCalibration: the calibration kept current (aci: online)
        if settings.calibration:
            from service.adaptive import ReplicaCalibration

            self.adaptive = ReplicaCalibration(settings, load_calibration(settings.calibration, self.predictor.identity))
            self.runner.calibration = self.adaptive.calibration
            self.model["calibration"] = calibration_info(self.runner.calibration)
        self._pending = 0  # shards received, not yet answered
        self._reports: list[BatchReport] = []  # batches not yet handed to the gateway
        self.max_batch_tokens = 0
        self.reconfigure({})
        log.info("replica %s ready on %s, budget %d bytes, batch tokens %d",
                 self.replica_id, self.device, self.budget, self.max_batch_tokens)

    def _default_batch_tokens(self) -> int:
        from kronos_core.engine.memory import max_batch_that_fits

        half = self.max_context // 2
        n = max_batch_that_fits(self.model_cfg, self.tokenizer_cfg, self.budget, half, half,
                                sample_count=1, max_context=self.max_context)
        return max(1, int(n)) * self.max_context

    def reconfigure(self, user_config: dict) -> None:
        """Live-tunable batching: ``max_batch_tokens``, ``batch_wait_timeout_s``."""
        user_config = user_config or {}
        tokens = user_config.get("max_batch_tokens") or self.settings.max_batch_tokens or self._default_batch_tokens()
        self.max_batch_tokens = int(tokens)
        self._batched.set_max_batch_size(self.max_batch_tokens)
        wait = user_config.get("batch_wait_timeout_s", self.settings.batch_wait_timeout_s)
        self._batched.set_batch_wait_timeout_s(float(wait))

    async def describe(self) -> ReplicaInfo:
        return ReplicaInfo(
            replica_id=self.replica_id, device=self.device, budget_bytes=self.budget,
            max_batch_tokens=self.max_batch_tokens, max_context=self.max_context,
            model_cfg=self.model_cfg, tokenizer_cfg=self.tokenizer_cfg, model=self.model,
        )

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        if _faults().shard_delay_s:
            await _test_delay()
        self._pending += 1
        try:
            res = await self._batched(shard)
        finally:
            self._pending -= 1
        # hand every batch report not yet delivered to this result: each is recorded once
        res.reports, self._reports = self._reports, []
        return res

    @serve.batch(max_batch_size=1 << 30, batch_wait_timeout_s=0.005, batch_size_fn=_shard_tokens)
    async def _batched(self, shards: list[Shard]) -> list[ShardResult]:
        depth = max(0, self._pending - len(shards))
        stamp = None if self.adaptive is None else self.adaptive.refresh(self.runner)  # the state this batch applies
        results, report = await asyncio.to_thread(self.runner.run, shards, depth)
        for shard, res in zip(shards, results, strict=True):
            if shard.calibrate:
                res.calibration_state = stamp
        self._reports.append(report)
        return results

    def check_health(self) -> None:
        return None
