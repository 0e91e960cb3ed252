"""The predictor replica: a Ray Serve deployment that owns one device.
Shards from concurrent requests go to a device loop (``service.replica.device_loop``: one on
a GPU, one per core on a CPU, each shard to the loop with the fewest tokens in flight; a CPU
replica's loops run in child processes by default, ``service.replica.loop_processes``) that
coalesces the shards arriving together into jobs and runs them one decode step at a time as the
step scheduler decides (``service.replica.scheduler``; execution, cancellation and out-of-memory
splitting in ``service.replica.step_runner.StepRunner``): small work first, big jobs preempted at
step boundaries and resumed where they stopped. Before it reports ready each loop runs one small
forecast (warm-up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray import serve
from ray.serve.config import RequestRouterConfig

from kronos_core.base.options import ForecastOptions
from kronos_core.calibration.policy import CalibrationDescription
from service.common.messages import ReplicaInfo, Shard, ShardResult
from service.common.settings import Settings
from service.replica.calibration import ReplicaCalibration
from service.replica.device_loop import DeviceLoop, DeviceLoops
from service.replica.loop_processes import LoopProcesses
from service.replica.memory import memory_model_for
from service.replica.policy import BatchingPolicy, replica_budget
from service.replica.step_runner import StepRunner
from service.replica.weights import ShippedWeights, localize

log = logging.getLogger(__name__)


@dataclass
class InjectedFaults:
    """Faults a test injects into one replica process; nothing in the service sets them.
    ``shard_delay_s``: every shard received waits this long before it joins a batch (a slow
    replica; cancellable, and clearing it releases the shards already waiting)."""

    shard_delay_s: float = 0.0


FAULTS = InjectedFaults()


def inject_fault(
    _actor: Any = None, shard_delay_s: float | None = None, exit_after_s: float | None = None
) -> dict:
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
    import service.replica.deployment

    return service.replica.deployment.FAULTS


async def _test_delay() -> None:
    start = time.monotonic()
    while time.monotonic() - start < _faults().shard_delay_s:
        await asyncio.sleep(0.05)


# a step-loop process that does not answer a health check in this long counts as dead (Serve's own
# health-check timeout is 30 s)
CHILD_HEALTH_TIMEOUT_S = 20.0

# the warm-up forecast: series, their longest lookback and horizon (run once at load)
WARMUP_SERIES = 8
WARMUP_LOOKBACK = 256
WARMUP_HORIZON = 8


def warmup_shard(max_context: int) -> Shard:
    """A small synthetic forecast that goes through every part of a real one (ragged lookbacks,
    prefill, decode, sampling with a seed, quantiles, detokenize), so the first user request does
    not pay for first-call set-up (allocator, kernels' lazy initialisation)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    longest = max(2, min(WARMUP_LOOKBACK, max_context - WARMUP_HORIZON))
    values, xts, yts = [], [], []
    for i in range(WARMUP_SERIES):
        n = max(2, longest - 16 * i)
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))  # (n,)
        # (n, 6)
        v = np.stack([close, close * 1.01, close * 0.99, close, np.full(n, 1e3), close * 1e3], 1)
        ts = pd.date_range("2024-01-01", periods=n + WARMUP_HORIZON, freq="h").to_numpy()
        values.append(v.astype(np.float32))
        xts.append(ts[:n])
        yts.append(ts[n:])
    options = ForecastOptions(
        horizon=WARMUP_HORIZON, sample_count=2, seed=0, quantiles=(0.1, 0.5, 0.9)
    )
    return Shard("warm-up", 0, values, xts, yts, options)


def load_calibration(path: str, identity):
    """The calibration file, refused (``CalibrationMismatch``) unless fitted for ``identity``."""
    from kronos_core.calibration.conformal import Calibration

    cal = Calibration.load(path)
    cal.check_model(identity)
    return cal


def _replica_cpus(settings: Settings) -> int | None:
    """The CPUs a CPU replica runs on: the setting (Serve sets it for each replica), else
    ``OMP_NUM_THREADS``, else None (torch's default)."""
    from_env = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    return int(settings.replica_cpus or 0) or from_env or None


def model_info(identity, max_context: int, cfg) -> dict[str, Any]:
    """The model block of ``/v1/models`` and every forecast response: identity, no server paths."""
    info = identity.as_dict()
    info["max_context"] = max_context
    info["dtype"] = cfg.dtype
    info["sliding"] = cfg.sliding
    info["compile"] = cfg.compile
    info["calibration"] = None
    if identity.random_weights:
        info["note"] = (
            "RANDOM weights: forecasts are not meaningful; set KRONOS_MODEL_DIR (or --model-dir) "
            "to a trained checkpoint"
        )
    return info


# placement: each shard to the replica with the least tokens in flight (service.replica.router);
# the field takes an import path or a class, whatever Ray's annotation says
LEAST_TOKENS = RequestRouterConfig(
    request_router_class="service.replica.router.LeastTokensRouter",  # type: ignore[arg-type]
)


@serve.deployment(
    name="Predictor",
    health_check_period_s=5,
    health_check_timeout_s=30,
    request_router_config=LEAST_TOKENS,
)
class Predictor:
    """A replica. ``replica_id`` and ``loop_name`` are given only to a step-loop process
    (``service.replica.loop_processes``): the replica it serves, and its loop's name."""

    def __init__(
        self,
        settings: Settings,
        shipped: ShippedWeights | None = None,
        replica_id: str | None = None,
        loop_name: str = "",
    ):
        in_serve = True
        try:
            serve_id = serve.get_replica_context().replica_id.unique_id
        except Exception:  # outside Serve: unit use, or a step-loop process
            serve_id, in_serve = f"local-{os.getpid()}", False
        if in_serve:  # the replica's lines (a weights re-fetch, its start) where the docs say
            from service.common.logs import configure_logging

            configure_logging(settings, "replica")
        settings = localize(settings, shipped)  # the driver's checkpoint, cached on this node
        self.settings = settings
        self.replica_id = replica_id or serve_id
        self._user_config: dict = {}
        self._choose_loops(_replica_cpus(settings))
        self.processes: LoopProcesses | None = None
        if in_serve and self.step_loops > 1 and settings.cpu_step_loop_mode == "process":
            self._start_processes()
            return
        # the first loop loads the model; every loop builds its own runner on the one model and
        # warms it up, on the loop's own thread (see DeviceLoop)
        loops: list[DeviceLoop] = []
        try:
            for k in range(self.step_loops):
                build = self._load if k == 0 else self._another_runner
                loops.append(DeviceLoop(build, self.torch_threads, name=f"{loop_name}{k}"))
        except BaseException:
            for loop in loops:
                loop.stop()
            raise
        self.loops = DeviceLoops(loops)
        log.info(
            "replica %s%s ready on %s: %d step loop(s) of %d torch thread(s), budget %d bytes per "
            "loop, batch tokens %d, warm-up %.2f s",
            self.replica_id,
            f" (step-loop process {loop_name}, pid {os.getpid()})" if loop_name else "",
            self.device,
            self.step_loops,
            self.torch_threads or 0,
            self.budget,
            self.max_batch_tokens,
            self.warmup_seconds,
        )

    def _start_processes(self) -> None:
        """Run each step loop in a child process (``service.replica.loop_processes``), with an
        equal share of the replica's CPUs and memory budget; this process only places shards."""
        budget = replica_budget(self.settings, self.device) // self.step_loops
        t0 = time.perf_counter()
        self.processes = LoopProcesses(
            type(self), self.settings, self.replica_id, self.step_loops, self.torch_threads or 1,
            budget, warmup=warmup_shard,
        )
        info = self.processes.info()
        self.budget, self.max_batch_tokens = info.budget_bytes, info.max_batch_tokens
        log.info(
            "replica %s ready on cpu: %d step-loop processes of %d torch thread(s), budget %d "
            "bytes per loop, batch tokens %d, started in %.2f s",
            self.replica_id, self.step_loops, self.torch_threads or 0, self.budget,
            self.max_batch_tokens, time.perf_counter() - t0,
        )

    def _choose_loops(self, cpus: int | None) -> None:
        """The device, the step loops and their torch threads: a GPU, one loop (torch's threads);
        a CPU, ``cpu_step_loops`` loops (default one per CPU) sharing the CPUs evenly."""
        import torch

        self.step_loops: int = 1
        self.torch_threads: int | None = None
        if self.settings.device != "cpu" and torch.cuda.is_available():
            self.device = "cuda:0"  # Ray sets CUDA_VISIBLE_DEVICES to this replica's GPU
            return
        self.device = "cpu"
        cpus = cpus or torch.get_num_threads()
        self.step_loops = max(1, min(self.settings.cpu_step_loops or cpus, cpus))
        self.torch_threads = max(1, cpus // self.step_loops)

    def _load(self) -> StepRunner:
        """Load the model, then build the first loop's runner (on that loop's thread)."""
        import torch

        from kronos_core.loading import load_predictor

        settings = self.settings
        self.predictor_config = settings.predictor_config(device=self.device)
        self.predictor = load_predictor(self.predictor_config)
        self.max_context = self.predictor.max_context
        self.model_cfg = self.predictor.model.config
        self.tokenizer_cfg = self.predictor.tokenizer.config
        self.model = model_info(self.predictor.identity, self.max_context, self.predictor_config)
        self.model["sampling"] = self.predictor.sampling.as_dict()  # a request's unset settings
        free = torch.cuda.mem_get_info()[0] if self.device.startswith("cuda") else None
        weights = self._weight_bytes()
        # the loops share the weights and split the rest of the replica's budget
        replica = replica_budget(settings, self.device, free)
        self.budget = weights + max(0, replica - weights) // self.step_loops
        # the calibration kept current (aci: online)
        self.adaptive: ReplicaCalibration | None = None
        # what it covers, as answers and the gateway see it
        self.calibration: CalibrationDescription | None = None
        if settings.calibration:
            self.adaptive = ReplicaCalibration(
                settings, load_calibration(settings.calibration, self.predictor.identity)
            )
            self.calibration = CalibrationDescription.of(self.adaptive.calibration)
            self.model["calibration"] = self.calibration.as_dict()
        self.max_batch_tokens = self._policy({}).max_batch_tokens
        self.warmup_seconds = 0.0
        return self._another_runner()

    def _another_runner(self) -> StepRunner:
        """A step runner on the shared model, with the replica's policy and calibration, warmed up
        (on its loop's thread)."""
        runner = StepRunner(
            self.predictor,
            self.replica_id,
            self.device,
            policy=self._policy(self._user_config),
            memory_model=memory_model_for(
                self.model_cfg, self.tokenizer_cfg, self.max_context, self.predictor_config.sliding
            ),
        )
        if self.adaptive is not None:
            self.adaptive.refresh(runner)  # the calibration and its stamp
        self.warmup_seconds += self._warm_up(runner)
        return runner

    def _weight_bytes(self) -> int:
        from kronos_core.engine.memory import memory_breakdown

        return memory_breakdown(
            self.model_cfg, self.tokenizer_cfg, 1, 1, 1, max_context=self.max_context
        ).weights

    def _warm_up(self, runner: StepRunner) -> float:
        """One small forecast through the runner, before the replica reports ready."""
        t0 = time.perf_counter()
        out: list[ShardResult] = []
        runner.submit(warmup_shard(self.max_context), out.append)
        runner.run_until_idle()
        runner.take_reports()  # not a user's batch: not reported
        if not out or out[0].error:
            raise RuntimeError(f"warm-up forecast failed: {out[0].error if out else 'no answer'}")
        return time.perf_counter() - t0

    def _default_batch_tokens(self) -> int:
        from kronos_core.engine.memory import max_batch_that_fits

        half = self.max_context // 2
        n = max_batch_that_fits(
            self.model_cfg,
            self.tokenizer_cfg,
            self.budget,
            half,
            half,
            sample_count=1,
            max_context=self.max_context,
        )
        return max(1, int(n)) * self.max_context

    def _policy(self, user_config: dict) -> BatchingPolicy:
        """The batching policy of each of this replica's loops (``service.replica.policy``): its
        memory is the loop's budget less the weights, which are loaded once and counted once."""
        return BatchingPolicy.for_replica(
            self.settings,
            self.device,
            self.budget - self._weight_bytes(),
            self._default_batch_tokens(),
            user_config,
        )

    async def reconfigure(self, user_config: dict) -> None:
        """Live-tunable batching: ``max_batch_tokens``, ``batch_wait_timeout_s``,
        ``max_prefill_tokens``, ``max_step_rows`` (handed on to the step-loop processes)."""
        self._user_config = dict(user_config or {})
        if self.processes is not None:
            await self.processes.reconfigure(self._user_config)
            return
        policy = self._policy(self._user_config)
        self.max_batch_tokens = policy.max_batch_tokens
        for runner in self.loops.runners:
            runner.use_policy(policy)

    async def describe(self) -> ReplicaInfo:
        if self.processes is not None:
            return self.processes.info()
        return ReplicaInfo(
            replica_id=self.replica_id,
            device=self.device,
            budget_bytes=self.budget,
            max_batch_tokens=self.max_batch_tokens,
            max_context=self.max_context,
            model_cfg=self.model_cfg,
            tokenizer_cfg=self.tokenizer_cfg,
            model=self.model,
            calibration=self.calibration,
            step_loops=self.step_loops,
        )

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        """The shard's result, from the device loop. Cancelled (the gateway dropped the call: client
        gone, deadline passed, a hedged copy answered first), its rows leave at the next step."""
        if _faults().shard_delay_s:
            await _test_delay()
        if self.processes is not None:
            return await self.processes.forecast_shard(shard)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ShardResult] = loop.create_future()

        def deliver(res: ShardResult) -> None:  # on the device thread
            loop.call_soon_threadsafe(_resolve, answer, res)

        index = self.loops.least_loaded()
        if self.adaptive is not None and shard.calibrate:
            # the latest persisted state, for the jobs that start next
            self.adaptive.refresh(self.loops.loops[index].runner)
        placed = self.loops.submit(index, shard, deliver)
        try:
            res = await answer
        except asyncio.CancelledError:
            placed.cancel()
            raise
        finally:
            self.loops.release(placed)
        # hand every batch report not yet delivered to this result: each is recorded once
        res.reports = [r for runner in self.loops.runners for r in runner.take_reports()]
        return res

    async def check_health(self) -> None:
        if self.processes is not None:
            await self.processes.check_health(CHILD_HEALTH_TIMEOUT_S)
        elif not self.loops.alive:
            raise RuntimeError("a device loop thread has stopped")

    def __del__(self) -> None:
        for part in ("loops", "processes"):
            held = getattr(self, part, None)
            if held is not None:
                held.stop()


def _resolve(fut: asyncio.Future, res: ShardResult) -> None:
    if not fut.done():
        fut.set_result(res)
