"""The threads that drive a replica's device.

A ``StepLoop`` is one thread with its own ``StepRunner``: it builds the runner (model load,
warm-up), then ticks it while it has work. A replica has one loop per GPU, and on a CPU one loop
per core by default (``Settings.cpu_step_loops``), each on one torch thread: on two cores, two
single-thread loops got through about twice the work of one loop whose operations were split over
two threads (docs/results/mixed.md, "One step loop per core"). ``StepLoops`` places
each shard on the loop with the fewest tokens in flight.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from service.common.messages import Shard, ShardResult
from service.replica.placement import TokenCounts
from service.replica.step_runner import PendingShard, StepRunner

log = logging.getLogger(__name__)


class StepLoop:
    """One thread that drives one step runner. It first builds the runner (``build``), then ticks
    it while it has work and sleeps on its ``wakeup`` condition otherwise (a shard's arrival, or
    the end of the coalescing wait, wakes it).

    ``torch_threads``: the torch threads this loop's operations use (set on the loop's thread
    before the build; None: torch's default). Every torch call of the loop, its runner's build
    included, runs on this thread: a thread that has used torch keeps a team of OpenMP workers, and
    two teams over the same cores made every step ~2x slower (docs/results/mixed.md, "One thread
    runs torch per loop").
    """

    def __init__(
        self, build: Callable[[], StepRunner], torch_threads: int | None = None, name: str = "0"
    ):
        self._stop = False
        self._built = threading.Event()
        self._error: BaseException | None = None
        self.torch_threads = torch_threads
        self._runner: StepRunner | None = None
        self.thread = threading.Thread(
            target=self._run, args=(build,), name=f"kronos-device-loop-{name}", daemon=True
        )
        self.thread.start()
        self._built.wait()
        if self._error is not None:
            raise self._error

    def _run(self, build: Callable[[], StepRunner]) -> None:
        try:
            if self.torch_threads:
                import torch

                torch.set_num_threads(self.torch_threads)
            self._runner = runner = build()
        except BaseException as exc:  # raised again in __init__, on the replica's thread
            self._error = exc
            return
        finally:
            self._built.set()
        while not self._stop:
            with runner.wakeup:  # checked and waited under the lock: no arrival is missed
                wait = runner.next_wakeup()
                if wait is None or wait > 0:
                    runner.wakeup.wait(wait)
                    continue
            try:
                runner.tick()
            except Exception:  # the loop must outlive any one job's failure
                log.exception("replica %s: step loop step failed", runner.replica_id)

    @property
    def runner(self) -> StepRunner:
        """The loop's step runner (built before ``__init__`` returns)."""
        assert self._runner is not None, "the step loop's runner is not built"
        return self._runner

    def stop(self) -> None:
        self._stop = True
        if self._runner is not None:
            with self._runner.wakeup:
                self._runner.wakeup.notify_all()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()


@dataclass(frozen=True)
class Placed:
    """A shard on one loop: ``cancel`` it there, and ``StepLoops.release`` it when its call
    ends."""

    index: int  # of the loop
    runner: StepRunner
    pending: PendingShard

    def cancel(self) -> None:
        self.runner.cancel(self.pending)


class StepLoops:
    """A replica's step loops, and the placement of its shards on them.

    Each shard goes to the loop with the fewest tokens in flight (``Shard.tokens`` of the shards
    placed there whose calls have not ended; the first loop on a tie), so a request cut into shards
    spreads over the loops, and a small request joins the loop with the least work. The count is
    exact: every placed shard is released once, answered or cancelled."""

    def __init__(self, loops: list[StepLoop]):
        if not loops:
            raise ValueError("a replica needs at least one step loop")
        self.loops = loops
        self._tokens = TokenCounts(range(len(loops)))

    @property
    def runners(self) -> list[StepRunner]:
        return [loop.runner for loop in self.loops]

    def least_loaded(self) -> int:
        """The index of the loop with the fewest tokens in flight."""
        return self._tokens.least(range(len(self.loops)))

    def submit(
        self, index: int, shard: Shard, on_done: Callable[[ShardResult], None]
    ) -> Placed:
        """Hand ``shard`` to loop ``index`` (from ``least_loaded``)."""
        runner = self.loops[index].runner
        self._tokens.add(index, shard.tokens)
        return Placed(index, runner, runner.submit(shard, on_done))

    def release(self, placed: Placed) -> None:
        self._tokens.take(placed.index, placed.pending.shard.tokens)

    def tokens_in_flight(self) -> list[int]:
        return self._tokens.snapshot(range(len(self.loops)))

    @property
    def alive(self) -> bool:
        return all(loop.alive for loop in self.loops)

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()
