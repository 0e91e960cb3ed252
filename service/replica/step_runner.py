"""The replica's batch execution, without Ray: ``StepRunner`` carries out what
``service.replica.scheduler`` decides (which shards form which jobs, each job's cuts, which jobs
start, step together or leave, and whether a job out of memory is halved), and puts each
shard's answer back together from the jobs that carried its series. It takes no scheduling
decision of its own. Unit-tested with fake engines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import PriceLimitRule
from kronos_core.calibration.conformal import Calibration
from kronos_core.calibration.policy import CalibrationPolicy
from service.common.interfaces import ForecastEngine, ForecastJob
from service.common.messages import BatchReport, Shard, ShardResult
from service.replica.memory import MemoryModel, device_memory, is_out_of_memory
from service.replica.policy import BatchingPolicy
from service.replica.scheduler import Arrival, JobPlan, Scheduler

log = logging.getLogger(__name__)

# ---- step-at-a-time execution (the replica's step loop) ----------------------------------------
# The replica runs every shard through ``StepRunner``, the one execution path (tests drive the
# same path with ``submit`` + ``run_until_idle``): the scheduler decides which shards arriving
# together form which jobs and each decode step's jobs; a job's rows keep their state between
# its steps.

GroupKey = tuple[ForecastOptions, bool, "str | None"]  # (options, calibrate, calibration group)


class PendingShard:
    """One shard at the replica: its answer is assembled from the parts of the jobs that carry its
    series (one job, or several after out-of-memory splits) and handed to ``on_done`` once."""

    def __init__(self, shard: Shard, on_done: Callable[[ShardResult], None], arrived: float):
        self.shard, self.on_done, self.arrived = shard, on_done, arrived
        self.cancelled = False  # its caller is gone (client disconnected, deadline passed)
        self.admitted = False  # its queue wait was recorded
        self.done = False
        self._parts: dict[int, tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]] = {}
        self._covered = 0
        self.calibration_state: dict | None = None  # the calibration stamp its parts applied

    def add_part(
        self,
        lo: int,
        hi: int,
        mean: np.ndarray,
        q: np.ndarray | None,
        paths: np.ndarray | None,
        replica_id: str,
        calibration_state: dict | None = None,
    ) -> None:
        """Series ``lo:hi`` of the shard are forecast: mean (n, H, 6), q (Q, n, H, 6), paths (n, S,
        H, 6)."""
        if self.done:
            return
        self._parts[lo] = (hi, mean, q, paths)
        if calibration_state is not None and self.calibration_state is None:
            self.calibration_state = calibration_state  # parts of OOM halves: the first part's
        self._covered += hi - lo
        if self._covered < self.shard.size:
            return
        parts = [self._parts[k] for k in sorted(self._parts)]
        s = self.shard
        self._finish(
            ShardResult(
                s.request_id,
                s.index,
                replica_id,
                np.concatenate([p[1] for p in parts], axis=0),
                None if parts[0][2] is None else np.concatenate([p[2] for p in parts], axis=1),
                np.concatenate([p[3] for p in parts], axis=0) if s.return_paths else None,
                calibration_state=self.calibration_state,
            )
        )

    def fail(self, message: str, replica_id: str) -> None:
        s = self.shard
        self._finish(
            ShardResult(
                s.request_id,
                s.index,
                replica_id,
                None,
                None,
                None,
                error=message,
                error_code=ErrorCode.FORECAST_FAILED,
            )
        )

    def _finish(self, result: ShardResult) -> None:
        if not self.done:
            self.done = True
            self._parts.clear()
            if not self.cancelled:  # else nobody waits for it
                self.on_done(result)


@dataclass
class Segment:
    """Series ``lo:hi`` of one pending shard, carried by a job."""

    pending: PendingShard
    lo: int
    hi: int


@dataclass
class DeviceBatch:
    """A coalesced group of shard series with the same options, run as one engine job."""

    job_id: int
    key: GroupKey
    segments: list[Segment]
    engine: ForecastJob | None = None
    started_at: float = 0.0
    decode_steps: int = 0  # steps it ran
    shared_steps: int = 0  # of those, steps shared with other jobs
    queue_wait_s: list[float] = field(default_factory=list)  # shards whose first series it admitted
    admitted_mid_batch: int = 0  # of those, shards admitted while another job was mid-decode
    options: ForecastOptions | None = None  # what it runs with, its calibration chosen at its start
    # the stamp of that calibration (adaptive: version, hash, updated_at)
    calibration_state: dict | None = None

    @property
    def series(self) -> int:
        return sum(g.hi - g.lo for g in self.segments)

    def inputs(self) -> tuple[list, list, list, list]:
        """values, x and y timestamps, and price-limit rules (None each: none) of its series."""
        values, xts, yts = [], [], []
        limits: list[PriceLimitRule | None] = []
        for g in self.segments:
            s = g.pending.shard
            values += s.values[g.lo : g.hi]
            xts += s.x_timestamps[g.lo : g.hi]
            yts += s.y_timestamps[g.lo : g.hi]
            rules = s.price_limits
            limits += rules[g.lo : g.hi] if rules is not None else [None] * (g.hi - g.lo)
        return values, xts, yts, limits

    @property
    def abandoned(self) -> bool:
        """Nobody waits for any of its series any more."""
        return all(g.pending.cancelled or g.pending.done for g in self.segments)


class StepRunner:
    """The replica's step loop body: shards in (``submit``, any thread), one ``tick`` at a time on
    the device thread: carry out the scheduler's next step (make the jobs it formed, close the
    ones that leave, start the admitted ones, run one decode step), deliver finished shards. An
    error at a job's start or step is reported to the scheduler (``failed``), which halves a job
    out of memory into two new jobs (nothing is lost; a single series that does not fit fails its
    shard); else the job's shards fail. Reports
    (one ``BatchReport`` per job) wait in ``take_reports`` for the replica to hand them to the
    gateway."""

    def __init__(
        self,
        predictor: ForecastEngine,
        replica_id: str,
        device: str,
        *,
        policy: BatchingPolicy | None = None,
        memory_model: MemoryModel | None = None,
        clock: Callable[[], float] = time.monotonic,
        **limits: Any,
    ):
        """``policy``: the batching policy (default: ``BatchingPolicy(**limits)``, for tests that
        set a few of its limits by name)."""
        self.predictor = predictor
        self.replica_id = replica_id
        self.device = device
        self.policy = policy if policy is not None else BatchingPolicy(**limits)
        self.calibration: Calibration | None = None  # this model's calibration, when configured
        # its stamp (adaptive calibration: version, hash, updated_at)
        self.calibration_state: dict | None = None
        self.memory_model = memory_model
        self.scheduler = Scheduler(
            self.policy.budget_bytes, job_memory=None if memory_model is None else self._job_memory
        )
        self.scheduler.configure(self.policy)  # every other figure, as a live reconfigure sets it
        self.clock = clock
        self.jobs: dict[int, DeviceBatch] = {}
        self._reports: list[BatchReport] = []
        # every scheduler call holds it: shards arrive on other threads
        self._lock = threading.RLock()
        # notified when a shard arrives or is cancelled
        self.wakeup = threading.Condition(self._lock)

    # ---- any thread ----------------------------------------------------------------------------
    def submit(self, shard: Shard, on_done: Callable[[ShardResult], None]) -> PendingShard:
        pending = PendingShard(shard, on_done, self.clock())
        with self._lock:
            self.scheduler.arrive(self._arrival(pending))
            self.wakeup.notify_all()
        return pending

    def cancel(self, pending: PendingShard) -> None:
        """The shard's caller is gone: its rows leave at the next step (the job's, once no live
        shard is left in it)."""
        with self._lock:
            pending.cancelled = True
            self.scheduler.cancel_shard(pending)
            self.wakeup.notify_all()

    def use_policy(self, policy: BatchingPolicy) -> None:
        """Batch by ``policy`` from the next tick on (the replica's live ``reconfigure``)."""
        with self._lock:
            self.policy = policy
            self.scheduler.configure(policy)

    def take_reports(self) -> list[BatchReport]:
        with self._lock:
            reports, self._reports = self._reports, []
        return reports

    def next_wakeup(self) -> float | None:
        """Seconds until ``tick`` has something to do (0: now), None when idle."""
        with self._lock:
            return self.scheduler.wakeup(self.clock())

    @property
    def waiting_shards(self) -> int:
        """Shards received, not yet admitted onto the device."""
        with self._lock:
            return self.scheduler.waiting_shards

    # ---- the device thread -----------------------------------------------------------------------
    def tick(self) -> bool:
        """One round of the step loop: carry out the scheduler's next step (make the jobs it
        formed, close the ones that leave, start the admitted ones, run one decode step); False
        when there was nothing to do."""
        with self._lock:
            for job_id, job in self.jobs.items():
                if job.abandoned:
                    self.scheduler.cancel(job_id)
            decided = self.scheduler.next_step(self.clock())
            for plan in decided.formed:
                self.jobs[plan.job_id] = self._job_of(plan)
        for job_id in decided.leave:
            self._drop(job_id)
        mid_batch = decided.admitted_mid_batch > 0
        for job_id in decided.admit:
            self._start(job_id, mid_batch)
        if decided.run is not None and decided.run in self.jobs:
            self._step(decided.step)
        return bool(decided.formed or decided.leave or decided.admit or decided.run is not None)

    def run_until_idle(self, max_ticks: int = 1 << 30) -> None:
        """Tick until nothing is left (tests and tools; the replica runs its own loop)."""
        for _ in range(max_ticks):
            wait = self.next_wakeup()
            if wait is None:
                return
            self.tick()

    def use_calibration(self, calibration: Calibration, state: dict | None) -> None:
        """Apply ``calibration`` (and name it by ``state``) to the jobs that start from now on;
        jobs already running keep the one they started with."""
        with self._lock:
            self.calibration, self.calibration_state = calibration, state

    def _options(
        self, options: ForecastOptions, calibrate: bool, group: str | None = None
    ) -> ForecastOptions:
        """The shard's options with this replica's calibration (the ``group``'s member of a file
        fitted per group) when the shard asks for it."""
        if not calibrate or self.calibration is None:
            return options
        return options.with_(calibration=CalibrationPolicy(self.calibration).member(group))

    def _empty_cache(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _arrival(self, pending: PendingShard) -> Arrival:
        """A shard as the scheduler sees it: the facts its rules decide by."""
        s = pending.shard
        paths = s.options.sample_count
        return Arrival(
            (s.options, s.calibrate, s.calibration_group),
            s.tokens,
            pending.arrived,
            ref=pending,
            costs=tuple(self.policy.prefill_cost(len(v), paths) for v in s.values),
            lengths=tuple(len(v) for v in s.values),
            paths=paths,
            steps=s.options.horizon,
            request=s.request_id,
        )

    def _job_memory(self, key: Hashable, lengths: list[int]) -> tuple[int, int]:
        """A job's (resident, transient) bytes: the memory model for its options group's."""
        assert self.memory_model is not None
        options: ForecastOptions = key[0]  # type: ignore[index]
        return self.memory_model(options, lengths)

    @staticmethod
    def _job_of(plan: JobPlan) -> DeviceBatch:
        """The job the scheduler formed, its segments on the pending shards."""
        segments = [Segment(ref, lo, hi) for ref, lo, hi in plan.segments]  # type: ignore[arg-type]
        return DeviceBatch(plan.job_id, plan.key, segments)  # type: ignore[arg-type]

    def _start(self, job_id: int, mid_batch: bool) -> None:
        job = self.jobs[job_id]
        now = self.clock()
        job.started_at = now
        for g in job.segments:
            if not g.pending.admitted:
                g.pending.admitted = True
                job.queue_wait_s.append(now - g.pending.arrived)
                job.admitted_mid_batch += int(mid_batch)
        options, calibrate, group = job.key
        values, xts, yts, limits = job.inputs()
        try:
            with self._lock:  # the calibration and its stamp change together (use_calibration)
                chosen = self._options(options, calibrate, group)
                job.calibration_state = (
                    self.calibration_state if chosen.calibration is not None else None
                )
            job.options = chosen
            job.engine = self.predictor.start_forecast(values, xts, yts, chosen,
                                                       price_limits=limits)
        except Exception as exc:
            self._failed(job, exc)

    def _step(self, step: tuple[int, ...]) -> None:
        """One decode step of the jobs the scheduler put in it (the picked one first)."""
        job = self.jobs[step[0]]
        group = [job, *(self.jobs[j] for j in step[1:])]
        try:
            if len(group) == 1:
                assert job.engine is not None
                job.engine.step()
            else:
                self.predictor.step_together([j.engine for j in group if j.engine is not None])
        except Exception as exc:  # a shared step's error is each job's (halves on out-of-memory)
            for j in group:
                self._failed(j, exc)
            return
        steps_left: dict[int, int] = {}
        shares_next: dict[int, bool] = {}
        for j in group:
            assert j.engine is not None
            j.decode_steps += 1
            j.shared_steps += int(len(group) > 1)
            steps_left[j.job_id] = 0 if j.engine.done else max(1, int(j.engine.steps_left))
            shares_next[j.job_id] = bool(j.engine.shares_steps)
        with self._lock:
            self.scheduler.stepped_together(steps_left, shares_next)
        for j in group:
            try:
                if steps_left[j.job_id] == 0:
                    self._finish(j)
            except Exception as exc:
                self._failed(j, exc)

    def _finish(self, job: DeviceBatch) -> None:
        engine = job.engine
        assert engine is not None
        options = job.options  # set in _start, before the engine existed
        assert options is not None
        res = engine.result()
        engine.close()
        q = np.asarray(res.quantiles, dtype=np.float32) if options.quantiles else None
        # (B, S, H, 6), corrected by the engine when calibrated
        paths = np.asarray(res.paths, dtype=np.float32)
        mean = np.asarray(res.mean, dtype=np.float32)  # (B, H, 6)
        self._report(job, tokens=int(res.stats.tokens_generated))
        del self.jobs[job.job_id]
        start = 0
        for g in job.segments:
            end = start + g.hi - g.lo
            g.pending.add_part(
                g.lo,
                g.hi,
                mean[start:end],
                None if q is None else q[:, start:end],
                paths[start:end],
                self.replica_id,
                job.calibration_state,
            )
            start = end

    def _failed(self, job: DeviceBatch, exc: BaseException) -> None:
        """The job's start or step raised: halves on out-of-memory, else its shards fail."""
        if job.engine is not None:
            job.engine.close()
            job.engine = None
        del self.jobs[job.job_id]
        n = job.series
        with self._lock:  # halved (both halves formed into the next step) or failed
            split = self.scheduler.failed(job.job_id, is_out_of_memory(exc))
        self._report(job, tokens=0, oom_split=split)
        if split:
            log.warning(
                "replica %s: out of memory on %d series, splitting in half", self.replica_id, n
            )
            self._empty_cache()
            return
        log.error("replica %s: forecast failed for %d series: %s", self.replica_id, n, exc)
        for g in job.segments:
            g.pending.fail(f"{type(exc).__name__}: {exc}", self.replica_id)

    def _drop(self, job_id: int) -> None:
        """A cancelled job leaves: its engine state (caches) is freed."""
        job = self.jobs.pop(job_id, None)
        if job is not None and job.engine is not None:
            job.engine.close()
            job.engine = None
            self._report(job, tokens=0)

    def _report(self, job: DeviceBatch, tokens: int, oom_split: bool = False) -> None:
        alloc, reserved, peak = device_memory(self.device)
        report = BatchReport(
            replica_id=self.replica_id,
            device=self.device,
            series=job.series,
            shards=len({id(g.pending) for g in job.segments}),
            engine_calls=1 if job.started_at else 0,
            oom_splits=int(oom_split),
            tokens_generated=tokens,
            seconds=self.clock() - job.started_at if job.started_at else 0.0,
            queue_depth=self.waiting_shards,
            mem_allocated=alloc,
            mem_reserved=reserved,
            mem_peak=peak,
            queue_wait_s=list(job.queue_wait_s),
            decode_steps=job.decode_steps,
            step_rows=job.series * job.key[0].sample_count,
            admitted_mid_batch=job.admitted_mid_batch,
            shared_steps=job.shared_steps,
        )
        with self._lock:
            self._reports.append(report)
