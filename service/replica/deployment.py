"""The predictor replica: a Ray Serve deployment that owns one device. It is a front that only
places work: its step loops sit behind one seam, ``self.core``, either a ``LoopWorker`` in its
own process (``service.replica.loop_worker``: a GPU's one loop, or a CPU's loops as threads) or
``LoopProcesses`` (``service.replica.loop_processes``: a CPU's loops each in a child process,
each child a one-loop ``LoopWorker``). Both place each shard on the loop with the fewest tokens
in flight, and each loop runs its step runner (``service.replica.step_runner``) as the step
scheduler decides (``service.replica.scheduler``): small work first, big jobs preempted at step
boundaries and resumed where they stopped. Before it reports ready each loop runs one small
forecast (warm-up, ``service.replica.warmup``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ray import serve
from ray.serve.config import RequestRouterConfig

from service.common.messages import ReplicaInfo, Shard, ShardResult
from service.common.settings import Settings
from service.replica.loop_processes import LoopProcesses
from service.replica.loop_worker import LoopWorker, choose_loops
from service.replica.policy import replica_budget
from service.replica.warmup import warmup_shard
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



def _replica_cpus(settings: Settings) -> int | None:
    """The CPUs a CPU replica runs on: the setting (Serve sets it for each replica), else
    ``OMP_NUM_THREADS``, else None (torch's default)."""
    from_env = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    return int(settings.replica_cpus or 0) or from_env or None


# placement: each shard to the replica with the least tokens in flight (service.replica.router);
# the field takes an import path or a class, whatever Ray's annotation says
LEAST_TOKENS = RequestRouterConfig(
    request_router_class="service.replica.router.LeastTokensRouter",  # type: ignore[arg-type]
)


class ReplicaCore(Protocol):
    """The seam between the front and its step loops: a ``LoopWorker`` (this process) or
    ``LoopProcesses`` (child processes)."""

    async def describe(self) -> ReplicaInfo: ...

    async def reconfigure(self, user_config: dict) -> None: ...

    async def forecast_shard(self, shard: Shard) -> ShardResult: ...

    async def check_health(self) -> None: ...

    def stop(self) -> None: ...


@serve.deployment(
    name="Predictor",
    health_check_period_s=5,
    health_check_timeout_s=30,
    request_router_config=LEAST_TOKENS,
)
class Predictor:
    """A replica: the front that places shards on its step loops (``core``)."""

    def __init__(self, settings: Settings, shipped: ShippedWeights | None = None):
        in_serve = True
        try:
            serve_id = serve.get_replica_context().replica_id.unique_id
        except Exception:  # outside Serve: unit use
            serve_id, in_serve = f"local-{os.getpid()}", False
        if in_serve:  # the replica's lines (a weights re-fetch, its start) where the docs say
            from service.common.logs import configure_logging

            configure_logging(settings, "replica")
        settings = localize(settings, shipped)  # the driver's checkpoint, cached on this node
        self.settings = settings
        self.replica_id = serve_id
        cpus = _replica_cpus(settings)
        device, loops, threads = choose_loops(settings, cpus)
        self.core: ReplicaCore
        if in_serve and loops > 1 and settings.cpu_step_loop_mode == "process":
            t0 = time.perf_counter()
            budget = replica_budget(settings, device) // loops
            self.core = LoopProcesses(
                LoopWorker, settings, self.replica_id, loops, threads or 1, budget,
                warmup=warmup_shard,
            )
            log.info(
                "replica %s ready on cpu: %d step-loop processes of %d torch thread(s), budget %d "
                "bytes per loop, started in %.2f s",
                self.replica_id, loops, threads or 0, budget, time.perf_counter() - t0,
            )
        else:
            self.core = LoopWorker(settings, self.replica_id, cpus=cpus)

    async def reconfigure(self, user_config: dict) -> None:
        """Live-tunable batching: ``max_batch_tokens``, ``batch_wait_timeout_s``,
        ``max_prefill_tokens``, ``max_step_rows`` (handed on to every loop)."""
        await self.core.reconfigure(user_config)

    async def describe(self) -> ReplicaInfo:
        return await self.core.describe()

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        """The shard's result, from a step loop. Cancelled (the gateway dropped the call: client
        gone, deadline passed, a hedged copy answered first), its rows leave at the next step."""
        if _faults().shard_delay_s:
            await _test_delay()
        return await self.core.forecast_shard(shard)

    async def check_health(self) -> None:
        await self.core.check_health()

    def __del__(self) -> None:
        core = getattr(self, "core", None)
        if core is not None:
            core.stop()
