"""A slow replica: a shard call unanswered past its deadline gets a copy sent to another
replica while the call is kept; the first answer wins and the other call is cancelled. The
deadline is ``shard_timeout_s`` and ``HEDGE_FACTOR`` times the median answer time of the
request's shards answered so far, so a service slow everywhere is not hedged. Replicas are
the fakes of ``service_fakes`` (no Ray); tests/integration/test_faults_http.py does the same
on a real Serve app."""

from __future__ import annotations

import asyncio

from service_fakes import FakeReplicas, RoutedReplicas, fake_gateway

from service.common.errors import ReplicaGone
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.gateway import ForecastPipeline
from service.gateway.dispatch import ShardRun

SYMBOLS = [f"S{i:03d}" for i in range(20)]  # 7 shards: six of 3, then the last 2 (plan_shards)


def _gateway(replicas, num_replicas: int = 2, **settings) -> tuple[ForecastPipeline, Metrics]:
    gw, m, _ = fake_gateway(replicas, num_replicas, **settings)
    return gw, m


def _forecast(gw: ForecastPipeline, symbols: list[str]):
    return asyncio.run(
        asyncio.wait_for(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)), 60)
    )


def _sample(m: Metrics, name: str) -> float:
    return m.registry.get_sample_value(name, {}) or 0.0


def test_shards_stuck_on_a_slow_replica_are_answered_by_the_other():
    reps = RoutedReplicas({"slow": None, "fast": 0.005})  # ties go to the slow one
    gw, m = _gateway(reps, shard_timeout_s=0.5, shard_retries=3)
    out = _forecast(gw, SYMBOLS)
    assert out.symbols == SYMBOLS and out.errors == []
    # each its own symbol
    assert [float(a[0, 3]) for a in out.mean] == [100.0 + i for i in range(20)]
    stuck = [sent for sent in reps.sent if sent[1] == "slow"]
    assert stuck, "precondition: the router sent some shards to the slow replica"
    assert {i for i, _ in reps.answered} == set(range(7)) and {n for _, n in reps.answered} == {
        "fast"
    }
    # every call left on the slow replica was cancelled
    assert sorted(reps.cancelled) == sorted(stuck)
    assert reps.ongoing == {"slow": 0, "fast": 0}
    # each stuck call was hedged once, onto "fast"
    assert out.timing["shard_timeouts"] == len(stuck)
    assert out.timing["shard_retries"] == out.timing["shard_timeouts"]  # no replica died
    assert _sample(m, "kronos_shard_timeouts_total") == out.timing["shard_timeouts"]
    assert _sample(m, "kronos_shard_retries_total") == out.timing["shard_retries"]
    assert _sample(m, "kronos_errors_total") == 0
    assert m.registry.get_sample_value("kronos_queue_depth", {"stage": "shards"}) == 0
    assert (
        m.registry.get_sample_value("kronos_batch_shards_total", {"replica": "fake-replica"}) == 7
    )


def test_a_service_slow_everywhere_is_not_hedged():
    """Every shard takes 10 times ``shard_timeout_s``, but as long as its peers: no copies."""
    reps = FakeReplicas(delay=0.5)
    gw, m = _gateway(reps, shard_timeout_s=0.05, shard_retries=2)
    out = _forecast(gw, SYMBOLS)
    assert out.symbols == SYMBOLS and out.errors == []
    assert out.timing["shard_timeouts"] == 0 and out.timing["shard_retries"] == 0
    assert reps.calls == out.timing["shards"] == 7
    assert _sample(m, "kronos_shard_timeouts_total") == 0


def test_the_deadline_follows_the_requests_own_answer_times():
    """``shard_timeout_s`` is only the floor: with every answer taking at least 0.3 s, no call
    is hedged before 3 x 0.3 s."""
    reps = RoutedReplicas({"fast": 0.3, "slow": None})  # ties go to "fast"
    gw, _ = _gateway(reps, shard_timeout_s=0.05, shard_retries=1)
    out = _forecast(gw, SYMBOLS)
    assert out.symbols == SYMBOLS and out.errors == []
    on_slow = [k for k, (_, name) in enumerate(reps.sent) if name == "slow"]
    assert on_slow, "precondition: the router sent some shards to the slow replica"
    assert {n for _, n in reps.answered} == {"fast"} and len(reps.answered) == 7
    assert out.timing["shard_timeouts"] == len(on_slow) == out.timing["shard_retries"]
    for k in on_slow:  # its copy: the next call of the same shard
        index = reps.sent[k][0]
        copy = next(j for j in range(k + 1, len(reps.sent)) if reps.sent[j][0] == index)
        assert reps.sent_at[copy] - reps.sent_at[k] >= 0.9 - 0.01, (reps.sent, reps.sent_at)


def test_a_hedged_call_that_dies_leaves_its_copy_to_answer():
    """The first call of shard 0 dies once its copy has been sent: no further send, the copy
    answers."""

    class DiesOnceCopied(FakeReplicas):
        def __init__(self):
            super().__init__()
            self.copy_sent = asyncio.Event()
            self.shard0_calls = 0

        async def forecast_shard(self, shard):
            if shard.index == 0:
                self.shard0_calls += 1
                if self.shard0_calls == 1:
                    await self.copy_sent.wait()
                    await asyncio.sleep(0)
                    raise ReplicaGone("ActorDiedError: killed")
                self.copy_sent.set()
                await asyncio.sleep(0.3)
            return await super().forecast_shard(shard)

    reps = DiesOnceCopied()
    # 2 shards of 1 series; shard 1 answers at once
    gw, m = _gateway(reps, shard_timeout_s=0.05, shard_retries=1)
    out = _forecast(gw, ["S001", "S002"])
    assert out.symbols == ["S001", "S002"] and out.errors == []
    assert (
        reps.shard0_calls == 2
        and out.timing["shard_timeouts"] == 1
        and out.timing["shard_retries"] == 1
    )
    assert _sample(m, "kronos_shard_retries_total") == 1


def test_the_hedge_deadline_and_the_shard_timeout_setting():
    run = ShardRun(2.0)
    assert run.hedge_after() is None  # no shard answered yet: nothing to compare with
    run.latencies += [0.1, 0.2, 5.0]
    assert run.hedge_after() == 2.0  # the floor: 3 x median 0.2 = 0.6 is less
    run.latencies += [4.0, 6.0]
    assert run.hedge_after() == 12.0  # 3 x the median 4.0
    assert ShardRun(None).hedge_after() is None
    gw, _ = _gateway(FakeReplicas(), shard_retries=3)
    assert gw.shard_timeout(300.0) == 30.0  # default: 30 s ...
    # ... or the deadline shared by the 4 sends (X-Kronos-Timeout-S 20)
    assert gw.shard_timeout(20.0) == 5.0
    gw, _ = _gateway(FakeReplicas(), shard_timeout_s=60.0)
    assert gw.shard_timeout(300.0) == 60.0 and gw.shard_timeout(10.0) == 10.0
    assert (
        _gateway(FakeReplicas(), num_replicas=1, shard_timeout_s=30.0)[0].shard_timeout(300.0)
        is None
    )
    assert _gateway(FakeReplicas(), shard_retries=0)[0].shard_timeout(300.0) is None
