"""Stage dispatch (``service.gateway.dispatch``): shards pulled a few at a time (per replica step
loop), a dead replica's shard re-sent (bounded), and a cancelled or failed request cancels its
shards."""

import asyncio

import pytest
from service_fakes import FakeReplicas, fake_gateway, sample_value

from service.common.errors import Overloaded
from service.common.schemas import ForecastRequest


def test_replica_death_is_retried():
    gw, m, reps = fake_gateway(FakeReplicas(die_first=2))
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2)))
    assert out.symbols == ["S001", "S002"] and out.errors == []
    assert out.timing["shard_retries"] == 2
    assert sample_value(m, "kronos_shard_retries_total") == 2


def test_retries_bounded_then_per_symbol_error():
    gw, m, reps = fake_gateway(FakeReplicas(die_first=100), shard_retries=1)
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)))
    assert out.symbols == [] and out.errors[0]["code"] == "replica_unavailable"


class CountingReplicas(FakeReplicas):
    """Records how many shards of a request are in flight at once."""

    def __init__(self):
        super().__init__(delay=0.01)
        self.now = 0
        self.peak = 0

    async def forecast_shard(self, shard):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super().forecast_shard(shard)
        finally:
            self.now -= 1


@pytest.mark.parametrize("per_replica, step_loops", [(1, 1), (2, 1), (1, 3)])
def test_shards_are_pulled_a_few_at_a_time(per_replica, step_loops):
    """A request keeps at most replicas x step loops x shards_in_flight_per_replica shards in
    flight, so the next shard goes to whichever replica frees up first; all still come back in
    request order."""
    reps = CountingReplicas()
    reps.info.step_loops = step_loops
    gw, _, _ = fake_gateway(reps, shards_in_flight_per_replica=per_replica)
    symbols = [f"S{i:03d}" for i in range(20)]  # all the fake store holds
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)))
    assert out.timing["shards"] >= 5 and reps.calls == out.timing["shards"]
    assert reps.peak == 2 * step_loops * per_replica  # num_replicas=2 in _gateway
    assert out.symbols == symbols


class BlockingReplicas(FakeReplicas):
    """forecast_shard() blocks until released (a slow replica); records which shards started,
    finished and were cancelled. ``fail_index``: that shard raises Overloaded (a full replica
    queue)."""

    def __init__(self, fail_index: int | None = None):
        super().__init__()
        self.fail_index = fail_index
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.release = asyncio.Event()

    async def forecast_shard(self, shard):
        self.started.append(shard.index)
        try:
            if shard.index == self.fail_index:
                await asyncio.sleep(0.01)
                raise Overloaded("replicas' queues are full", 1)
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(shard.index)
            raise
        self.finished.append(shard.index)
        return await super().forecast_shard(shard)


async def _until(cond, what: str, timeout: float = 30.0) -> None:
    """Polls ``cond()`` on the event loop until true (generous deadline: this is not a timing
    test)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_cancelled_request_cancels_its_in_flight_shards_and_sends_no_more():
    """The client went away (the ingress task is cancelled): every shard call in flight is
    cancelled, none of the waiting shards is ever sent, and the gauges return to zero."""
    reps = BlockingReplicas()
    gw, m, _ = fake_gateway(reps)  # 2 replicas x 2 shards in flight
    symbols = [f"S{i:03d}" for i in range(20)]  # 7 shards of <= 3 series

    async def main():
        task = asyncio.ensure_future(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)))
        await _until(lambda: len(reps.started) == 4, "4 shards in flight")
        assert sample_value(m, "kronos_queue_depth", {"stage": "shards"}) == 4
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        reps.release.set()  # a replica that would now answer must find nobody waiting
        for _ in range(20):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert sorted(reps.cancelled) == sorted(reps.started) == [0, 1, 2, 3]
    assert reps.finished == [] and len(reps.started) == 4  # shards 4..6 were never sent
    assert sample_value(m, "kronos_queue_depth", {"stage": "shards"}) == 0
    assert sample_value(m, "kronos_queue_depth", {"stage": "requests"}) == 0
    assert gw._inflight == 0


def test_a_failing_shard_cancels_the_other_shards():
    """One shard is refused (Overloaded): the request answers 503 at once, and the shards
    still running for it are cancelled instead of holding replicas for a dead request."""
    reps = BlockingReplicas(fail_index=1)
    gw, m, _ = fake_gateway(reps)
    symbols = [f"S{i:03d}" for i in range(20)]

    async def main():
        with pytest.raises(Overloaded):
            await asyncio.wait_for(
                gw.forecast(ForecastRequest(symbols=symbols, horizon=2)), timeout=10
            )
        # checked before asyncio.run's own clean-up could cancel leftovers
        return list(reps.started), list(reps.cancelled), gw.dispatcher.shards_in_flight

    started, cancelled, shards_inflight = asyncio.run(main())
    assert 1 in started and sorted(cancelled) == sorted(i for i in started if i != 1)
    assert len(cancelled) >= 3 and reps.finished == []
    assert shards_inflight == 0 and gw._inflight == 0
