"""Stage 2b, dispatch: a request's shards sent to the replicas a few at a time, re-sent when a
replica dies, hedged on another replica when one is much slower than the others."""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kronos_core.base.errors import ErrorCode
from service.common.errors import ReplicaGone
from service.common.interfaces import Replicas
from service.common.messages import Shard, ShardResult
from service.common.metrics import Metrics
from service.common.settings import Settings

log = logging.getLogger(__name__)

# shard_timeout_s unset: at most this (or the deadline / (shard_retries + 1))
DEFAULT_SHARD_TIMEOUT_S = 30.0
# a call is slow past this many times the median answer time of the request's shards
HEDGE_FACTOR = 3.0
# how often a waiting shard re-reads that median (other shards keep answering)
HEDGE_RECHECK_S = 1.0


@dataclass
class ShardRun:
    """One request's shard bookkeeping: the hedging rule's inputs and what ``timing`` reports.

    A call is hedged (a copy sent to another replica) once it has waited ``shard_timeout_s``
    AND ``HEDGE_FACTOR`` times the median answer time of the shards of this request answered
    so far; not before any shard has been answered. A service slow everywhere (every shard
    slow) is thus never hedged, only a replica slower than the others."""

    shard_timeout_s: float | None  # None: never hedge
    retries: int = 0  # re-sends: replica gone, or hedged
    timeouts: int = 0  # calls hedged
    # s from a shard's first send to its answer
    latencies: list[float] = field(default_factory=list)

    def hedge_after(self) -> float | None:
        if self.shard_timeout_s is None or not self.latencies:
            return None
        return max(self.shard_timeout_s, HEDGE_FACTOR * statistics.median(self.latencies))


def shard_timeout(settings: Settings, num_replicas: int, request_timeout_s: float) -> float | None:
    """The least a shard's call waits before it may be hedged: ``shard_timeout_s``, by
    default 30 s or the request's deadline shared by the shard's sends (``/ (shard_retries
    + 1)``), whichever is less. None with one replica: there is nowhere else to go."""
    if num_replicas < 2 or settings.shard_retries == 0:
        return None
    if settings.shard_timeout_s is not None:
        return min(settings.shard_timeout_s, request_timeout_s)
    return min(DEFAULT_SHARD_TIMEOUT_S, request_timeout_s / (settings.shard_retries + 1))


INTERRUPTED_MESSAGE = "the service shut down before this symbol's shard was answered; send it again"


def interrupted(shard: Shard) -> ShardResult:
    """The answer of a shard cut at shutdown: its symbols become ``interrupted`` errors."""
    return ShardResult(shard.request_id, shard.index, "", None, None, None,
                       error=INTERRUPTED_MESSAGE, error_code=ErrorCode.INTERRUPTED)


class Dispatcher:
    """Sends shards to the ``replicas``; ``shards_in_flight`` (all requests) feeds the
    ``kronos_queue_depth{stage="shards"}`` gauge. ``cut``: returns once the requests in flight
    must stop (the shutdown grace is nearly over, ``Lifecycle.wait_cut``); None: never."""

    def __init__(self, settings: Settings, replicas: Replicas, metrics: Metrics, num_replicas: int,
                 cut: Callable[[], Awaitable[None]] | None = None):
        self.settings = settings
        self.replicas = replicas
        self.metrics = metrics
        self.num_replicas = num_replicas
        self.cut = cut
        self.shards_in_flight = 0

    async def run_all(self, shards: list[Shard], run: ShardRun, loops: int) -> list[ShardResult]:
        """Every shard's answer, in shard order. Once ``cut`` returns, the shards not answered
        yet are cancelled and answered ``interrupted`` (the answered ones are kept). ``loops``:
        the replicas' step loops in all."""
        # Pull model: a request keeps only a few shards in flight (by default two per step loop:
        # one running, one queued so the loop never idles between shards); the next shard goes to
        # the replica that frees up first (the router counts tokens in flight). Sending all shards
        # at once let Serve's default router pile 3 of 4 on one replica while the other idled.
        in_flight = asyncio.Semaphore(
            max(1, loops * self.settings.shards_in_flight_per_replica)
        )

        async def one(shard: Shard) -> ShardResult:
            async with in_flight:
                return await self._run_shard(shard, run)

        tasks = [asyncio.ensure_future(one(s)) for s in shards]
        try:
            if self.cut is None or not tasks:
                return list(await asyncio.gather(*tasks))
            return await self._until_cut(shards, tasks)
        except BaseException:  # cancelled (client gone) or overloaded: stop the other shards
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _until_cut(
        self, shards: list[Shard], tasks: list[asyncio.Task[ShardResult]]
    ) -> list[ShardResult]:
        """The shards' answers, or, once ``cut`` returns, the answered ones and ``interrupted``
        for the others (cancelled)."""
        assert self.cut is not None
        cut = asyncio.ensure_future(self.cut())
        try:
            pending = set(tasks)
            while pending and not cut.done():
                done, _ = await asyncio.wait([*pending, cut], return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                for t in done - {cut}:
                    failure = t.exception()
                    # not a replica death (those are answers): the request's
                    if failure is not None:
                        raise failure
            if not pending:
                return [t.result() for t in tasks]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            log.warning("shutdown grace nearly over: request %s cut, %d of %d shard(s) unanswered",
                        shards[0].request_id, len(pending), len(shards))
            return [
                interrupted(s) if t in pending else t.result()
                for s, t in zip(shards, tasks, strict=True)
            ]
        finally:
            cut.cancel()

    async def _run_shard(self, shard: Shard, run: ShardRun) -> ShardResult:
        self.shards_in_flight += 1
        self.metrics.queue_depth.labels(stage="shards").set(self.shards_in_flight)
        try:
            return await self._send_until_answered(shard, run)
        finally:
            self.shards_in_flight -= 1
            self.metrics.queue_depth.labels(stage="shards").set(self.shards_in_flight)

    async def _send_until_answered(self, shard: Shard, run: ShardRun) -> ShardResult:
        """Sends ``shard`` until a replica answers it, at most ``shard_retries`` re-sends.

        A replica that dies (``ReplicaGone``) gets its shard re-sent after a short backoff. A
        call unanswered past ``run.hedge_after()`` gets a copy of the shard sent while the call
        is kept (a hedged request): the handle routes by queue length, so the slow call, still
        counted on the slow replica, steers the copy to another one; cancelling first would
        empty the slow replica's queue and invite the copy back to it. The first answer wins
        and every other call is cancelled. The last allowed send waits without a shard deadline.
        """
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Future] = set()
        sends, failure, first_sent, sent_at = 0, "", loop.time(), loop.time()
        try:
            while True:
                if sends == 0 or (not pending and failure):
                    pending.add(asyncio.ensure_future(self.replicas.forecast_shard(shard)))
                    sends, sent_at = sends + 1, loop.time()
                last = sends > self.settings.shard_retries
                due = None if last else run.hedge_after()
                wait_s = None if last or run.shard_timeout_s is None else HEDGE_RECHECK_S
                if due is not None:
                    wait_s = min(HEDGE_RECHECK_S, max(0.0, due - (loop.time() - sent_at)))
                done, pending = await asyncio.wait(
                    pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    due = None if last else run.hedge_after()
                    # slow: hedge on another replica
                    if due is not None and loop.time() - sent_at >= due:
                        run.timeouts += 1
                        self.metrics.shard_timeouts.inc()
                        self._count_retry(run)
                        log.warning(
                            "shard %s/%d: no answer within %.3g s; sending a copy (send %d)",
                            shard.request_id, shard.index, due, sends + 1,
                        )
                        pending.add(asyncio.ensure_future(self.replicas.forecast_shard(shard)))
                        sends, sent_at = sends + 1, loop.time()
                    continue
                answers = [t.result() for t in done if t.exception() is None]
                for res in answers:  # a loser's batch reports are recorded too: each exactly once
                    for rep in res.reports:
                        self.metrics.record_batch(rep)
                if answers:
                    run.latencies.append(loop.time() - first_sent)
                    return answers[0]
                for t in done:
                    exc = t.exception()
                    if not isinstance(exc, ReplicaGone):
                        raise exc
                    failure = str(exc)
                if pending:
                    continue  # a hedged copy may still answer
                if last:
                    return ShardResult(
                        shard.request_id, shard.index, "", None, None, None,
                        error=f"replica unavailable after {sends} attempts: {failure}",
                        error_code=ErrorCode.REPLICA_UNAVAILABLE,
                    )
                self._count_retry(run)
                log.warning(
                    "shard %s/%d: replica gone (%s); retry %d", shard.request_id, shard.index,
                    failure, sends,
                )
                await asyncio.sleep(min(2.0, 0.2 * sends))
        finally:
            for t in pending:  # the slower copies: drop them where Ray still can
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _count_retry(self, run: ShardRun) -> None:
        run.retries += 1
        self.metrics.shard_retries.inc()
