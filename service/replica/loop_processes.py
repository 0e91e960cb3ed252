"""A CPU replica's step loops, each in its own process.

Two step loops in one Python process take turns holding the interpreter lock between torch
operations, and a decode step of a small model is mostly such turns: offline, two threads ran a
10-row step in ~11 ms each against 6.65 ms alone, and two processes in ~8 ms (docs/service.md,
"Scheduling", "Each loop in its own process"). So a CPU replica with more than one loop runs
each loop in a child process by default (``Settings.cpu_step_loop_mode``): a Ray actor of a
one-loop ``LoopWorker`` (``service.replica.loop_worker``) with the loop's share of the CPUs and of
the memory budget, pinned to the replica's node and owned by it (Ray ends the children when the
replica ends). It answers the calls a ``LoopWorker`` answers, so the replica's front
(``service.replica.deployment.Predictor``) holds either behind one seam.

The replica then only places shards: each goes to the child with the fewest tokens in flight,
as the thread loops are placed (``service.replica.step_loop.StepLoops``). A cancelled call
cancels the child's task (Ray raises ``CancelledError`` inside it, and the child drops the
shard's rows at its next step). A child that dies fails the calls it held with a clear error and
makes the replica report itself unhealthy, so Serve replaces it and its children.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from service.common.messages import ReplicaInfo, Shard, ShardResult
from service.common.settings import Settings
from service.replica.placement import TokenCounts

log = logging.getLogger(__name__)

# a step-loop process that does not answer a health check in this long counts as dead (Serve's own
# health-check timeout is 30 s)
CHILD_HEALTH_TIMEOUT_S = 20.0


class LoopProcessDied(RuntimeError):
    """A step-loop process of the replica ended; the replica is unhealthy from then on."""


class LoopProcesses:
    """The child processes of one CPU replica, one step loop each, and the placement of shards on
    them by tokens in flight.

    ``worker_class``: the class of each child (``LoopWorker``), a Ray actor built with
    ``settings`` narrowed to one loop of ``cpus_per_loop`` CPUs and ``budget_per_loop`` bytes, and
    with the parent's ``replica_id`` (its batch reports name the replica the gateway called).
    Blocks until every child has loaded the model and warmed up, then sends each the shard
    ``warmup(max_context)`` makes, if given, and drops its answer."""

    def __init__(
        self,
        worker_class: type,
        settings: Settings,
        replica_id: str,
        loops: int,
        cpus_per_loop: int,
        budget_per_loop: int,
        warmup: Callable[[int], Shard] | None = None,
    ):
        if loops < 1:
            raise ValueError("a replica needs at least one step-loop process")
        child_settings = settings.model_copy(
            update={
                "replica_cpus": float(cpus_per_loop),
                "cpu_step_loops": 1,
                "device_budget_bytes": int(budget_per_loop),
            }
        )
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor: Any = ray.remote(worker_class).options(
            num_cpus=0,  # the replica holds the CPUs its loops run on
            scheduling_strategy=here,
            max_restarts=0,  # a dead loop makes the replica unhealthy; Serve replaces both
            # as Serve's own actors: no task events to the GCS for every shard (the state API does
            # not list these calls)
            enable_task_events=False,
        )
        self.replica_id = replica_id
        self.children: list[Any] = [
            actor.remote(child_settings, replica_id, loop_name=f"p{k}", cpus=cpus_per_loop)
            for k in range(loops)
        ]
        self._tokens = TokenCounts(range(loops))
        self._lock = threading.Lock()
        self.dead: dict[int, str] = {}  # child index -> how it ended
        try:
            self.infos: list[ReplicaInfo] = ray.get([c.describe.remote() for c in self.children])
            if warmup is not None:
                # each child warmed up on its own; this warms the calls from here to it (the first
                # call to an actor sets up its connection), so the first user shard does not pay
                shard = warmup(self.infos[0].max_context)
                ray.get([c.forecast_shard.remote(shard) for c in self.children])
        except BaseException:
            self.stop()
            raise

    async def describe(self) -> ReplicaInfo:
        return self.info()

    def info(self) -> ReplicaInfo:
        """The replica's description: its first child's (``budget_bytes`` is each loop's, as with
        thread loops), with the loops counted."""
        return dataclasses.replace(
            self.infos[0], replica_id=self.replica_id, step_loops=len(self.children)
        )

    def least_loaded(self) -> int:
        """The live child with the fewest tokens in flight (``LoopProcessDied`` when none is)."""
        with self._lock:
            live = [k for k in range(len(self.children)) if k not in self.dead]
            if not live:
                raise LoopProcessDied("; ".join(self.dead.values()))
            return self._tokens.least(live)

    def _ended(self, index: int, exc: BaseException) -> str:
        first = str(exc).splitlines()[0] if str(exc) else "no detail"
        why = (
            f"replica {self.replica_id}: step-loop process {index} ended "
            f"({exc.__class__.__name__}: {first}); the replica is unhealthy and will be replaced"
        )
        with self._lock:
            self.dead.setdefault(index, why)
        log.error("%s", why)
        return why

    def tokens_in_flight(self) -> list[int]:
        return self._tokens.snapshot(range(len(self.children)))

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        """The shard's result from the least-loaded live child (which attached its batch
        reports)."""
        index = self.least_loaded()
        self._tokens.add(index, shard.tokens)
        ref = self.children[index].forecast_shard.remote(shard)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)  # the child's task gets CancelledError and drops the shard's rows
            raise
        except RayActorError as exc:
            raise LoopProcessDied(self._ended(index, exc)) from exc
        finally:
            self._tokens.take(index, shard.tokens)

    async def check_health(self, timeout_s: float = CHILD_HEALTH_TIMEOUT_S) -> None:
        """Raises ``LoopProcessDied`` when a child has ended or does not answer in time."""
        for index, child in enumerate(self.children):
            if index in self.dead:
                continue
            try:
                await asyncio.wait_for(child.check_health.remote(), timeout_s)
            except (RayActorError, asyncio.TimeoutError) as exc:
                self._ended(index, exc)
        if self.dead:
            raise LoopProcessDied("; ".join(self.dead.values()))

    async def reconfigure(self, user_config: dict) -> None:
        await asyncio.gather(*[c.reconfigure.remote(user_config) for c in self.children])

    def stop(self) -> None:
        for child in self.children:
            try:
                ray.kill(child)
            except Exception:  # already gone, or Ray is shutting down
                pass
