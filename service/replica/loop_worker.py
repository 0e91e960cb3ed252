"""A replica's step loops in one process: the model, loaded once, and one step loop thread per
loop (``service.replica.step_loop``), each with its own step runner. The Serve replica
(``service.replica.deployment.Predictor``, the front) runs one in its own process, or several as
child processes (``service.replica.loop_processes``: each child is a one-loop ``LoopWorker``
actor); both sides answer the same five calls: ``describe``, ``reconfigure``,
``forecast_shard``, ``check_health``, ``stop``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from kronos_core.base.price_limits import price_limits_info
from kronos_core.calibration.policy import CalibrationDescription
from service.common.messages import ReplicaInfo, Shard, ShardResult
from service.common.settings import Settings
from service.replica.calibration import ReplicaCalibration
from service.replica.memory import memory_model_for
from service.replica.policy import BatchingPolicy, replica_budget
from service.replica.step_loop import StepLoop, StepLoops
from service.replica.step_runner import StepRunner
from service.replica.warmup import warmup_shard

log = logging.getLogger(__name__)


def choose_loops(settings: Settings, cpus: int | None) -> tuple[str, int, int | None]:
    """(device, step loops, torch threads per loop): a GPU, one loop on torch's threads; a CPU,
    ``cpu_step_loops`` loops (default one per CPU) sharing the ``cpus`` evenly."""
    import torch

    if settings.device != "cpu" and torch.cuda.is_available():
        return "cuda:0", 1, None  # Ray sets CUDA_VISIBLE_DEVICES to this replica's GPU
    cpus = cpus or torch.get_num_threads()
    loops = max(1, min(settings.cpu_step_loops or cpus, cpus))
    return "cpu", loops, max(1, cpus // loops)


def device_speed(device: str):
    """The speed figures the gateways plan requests with (``ReplicaInfo.speed``): measured on this
    thread for a CPU, with the loop's torch threads (about 0.25 s, while the replica loads), or a
    GPU's by its name (``kronos_core.plan.roofline.engine_device``). None when that fails: the
    service then refuses no request on its plan."""
    from kronos_core.plan.roofline import engine_device

    try:
        return engine_device(device)
    except Exception as exc:  # noqa: BLE001 - the replica serves all the same
        log.warning("no speed figures for %s (%s: %s): requests are not planned against their "
                    "deadlines", device, type(exc).__name__, exc)
        return None


def load_calibration(path: str, identity):
    """The calibration file, refused (``CalibrationMismatch``) unless fitted for ``identity``."""
    from kronos_core.calibration.conformal import Calibration

    cal = Calibration.load(path)
    cal.check_model(identity)
    return cal


def model_info(identity, max_context: int, cfg) -> dict:
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


class LoopWorker:
    """One process's step loops on one loaded model. ``replica_id``: the replica its batch reports
    name; ``loop_name``: a prefix for its loops' thread names (a child process's, ``p0``...);
    ``cpus``: the CPUs it runs on (None: torch's threads)."""

    def __init__(
        self, settings: Settings, replica_id: str, loop_name: str = "", cpus: int | None = None
    ):
        self.settings = settings
        self.replica_id = replica_id
        self._user_config: dict = {}
        self.device, self.step_loops, self.torch_threads = choose_loops(settings, cpus)
        # the first loop loads the model; every loop builds its own runner on the one model and
        # warms it up, on the loop's own thread (see StepLoop)
        loops: list[StepLoop] = []
        try:
            for k in range(self.step_loops):
                build = self._load if k == 0 else self._another_runner
                loops.append(StepLoop(build, self.torch_threads, name=f"{loop_name}{k}"))
        except BaseException:
            for loop in loops:
                loop.stop()
            raise
        self.loops = StepLoops(loops)
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

    @property
    def runners(self) -> list[StepRunner]:
        return self.loops.runners

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
        self.model["price_limits"] = price_limits_info(settings.price_limits)
        moves = self.predictor.moves  # the model's move correction, if it has one
        self.model["moves"] = None if moves is None else moves.as_dict()
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
        self.speed = device_speed(self.device) if settings.deadline_check else None
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
        ``max_prefill_tokens``, ``max_step_rows``."""
        self._user_config = dict(user_config or {})
        policy = self._policy(self._user_config)
        self.max_batch_tokens = policy.max_batch_tokens
        for runner in self.loops.runners:
            runner.use_policy(policy)

    async def describe(self) -> ReplicaInfo:
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
            speed=self.speed,
        )

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        """The shard's result, from the loop with the fewest tokens in flight. Cancelled (the
        caller dropped the call), its rows leave at the next step."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ShardResult] = loop.create_future()

        def deliver(res: ShardResult) -> None:  # on the step loop's thread
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
        if not self.loops.alive:
            raise RuntimeError("a step loop thread has stopped")

    def stop(self) -> None:
        self.loops.stop()


def _resolve(fut: asyncio.Future, res: ShardResult) -> None:
    if not fut.done():
        fut.set_result(res)
