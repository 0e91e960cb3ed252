"""A slow replica: a shard past its deadline (``shard_timeout_s``) gets a copy sent to another
replica while its own call is kept, the first answer wins and the other call is cancelled.
Replicas are the fakes of ``service_fakes`` (no Ray); tests/integration/test_faults_http.py
does the same on a real Serve app."""

from __future__ import annotations

import asyncio

from service_fakes import FakeReplicas, FakeStore, RoutedReplicas, fake_future

from service.gateway import FutureTimestamps, Gateway
from service.metrics import Metrics
from service.schemas import ForecastRequest
from service.settings import Settings

SYMBOLS = [f"S{i:03d}" for i in range(20)]  # 7 shards of <= 3 series


def _gateway(replicas, num_replicas: int = 2, **settings) -> tuple[Gateway, Metrics]:
    s = Settings(**{"max_context": 64, "shards_per_replica": 2, **settings})
    m = Metrics()
    gw = Gateway(s, FakeStore(), replicas, m, num_replicas=num_replicas,
                 fit_factory=lambda info, h, sc: (lambda L: 3), future=FutureTimestamps(fake_future))
    return gw, m


def _sample(m: Metrics, name: str) -> float:
    return m.registry.get_sample_value(name, {}) or 0.0


def test_shards_stuck_on_a_slow_replica_are_answered_by_the_other():
    reps = RoutedReplicas(stalled=("slow",))
    gw, m = _gateway(reps, shard_timeout_s=0.5, shard_retries=3)
    out = asyncio.run(asyncio.wait_for(gw.forecast(ForecastRequest(symbols=SYMBOLS, horizon=2)), 60))
    assert out.symbols == SYMBOLS and out.errors == []
    assert [float(a[0, 3]) for a in out.mean] == [100.0 + i for i in range(20)]  # each its own symbol
    stuck = {i for i, name in reps.sent if name == "slow"}
    assert stuck, "precondition: the router sent some shards to the slow replica"
    assert {i for i, _ in reps.answered} == set(range(7)) and {n for _, n in reps.answered} == {"fast"}
    assert sorted(reps.cancelled) == sorted((i, "slow") for i in stuck for _ in range(reps.sent.count((i, "slow"))))
    assert reps.ongoing == {"slow": 0, "fast": 0}  # nothing left hanging on either replica
    assert out.timing["shard_timeouts"] >= len(stuck)
    assert out.timing["shard_retries"] == out.timing["shard_timeouts"]  # no replica died
    assert _sample(m, "kronos_shard_timeouts_total") == out.timing["shard_timeouts"]
    assert _sample(m, "kronos_shard_retries_total") == out.timing["shard_retries"]
    assert _sample(m, "kronos_errors_total") == 0
    assert m.registry.get_sample_value("kronos_queue_depth", {"stage": "shards"}) == 0
    assert m.registry.get_sample_value("kronos_batch_shards_total", {"replica": "fake-replica"}) == 7


def test_a_uniformly_slow_service_is_not_failed_by_the_shard_deadline():
    """Every replica is slower than the deadline: each shard gets ``shard_retries`` copies,
    the last send waits without a shard deadline, the first call's answer is used and the
    copies are cancelled."""
    reps = FakeReplicas(delay=1.0)
    gw, m = _gateway(reps, shard_timeout_s=0.05, shard_retries=2)
    out = asyncio.run(asyncio.wait_for(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)), 60))
    assert out.symbols == ["S001"] and out.errors == []
    assert out.timing["shards"] == 1
    assert out.timing["shard_timeouts"] == 2 and out.timing["shard_retries"] == 2
    assert reps.calls == 3  # the first send and two copies
    assert _sample(m, "kronos_shard_timeouts_total") == 2
    # a copy that answered in the same instant is not lost from the metrics: 1 to 3 batches
    assert 1 <= m.registry.get_sample_value("kronos_batch_shards_total", {"replica": "fake-replica"}) <= 3


def test_a_replica_death_during_a_hedge_still_leaves_the_copy_to_answer():
    """The first call dies after its deadline passed and a copy was sent: no extra re-send, the
    copy answers."""

    class DiesLate(FakeReplicas):
        async def forecast_shard(self, shard):
            self.calls += 1
            if self.calls == 1:
                await asyncio.sleep(0.3)
                from service.gateway import ReplicaGone

                raise ReplicaGone("ActorDiedError: killed")
            await asyncio.sleep(0.6)
            results, report = self.runner.run([shard])
            results[0].reports = [report]
            return results[0]

    reps = DiesLate()
    gw, _ = _gateway(reps, shard_timeout_s=0.1, shard_retries=1)
    out = asyncio.run(asyncio.wait_for(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)), 60))
    assert out.symbols == ["S001"] and out.errors == []
    assert reps.calls == 2 and out.timing["shard_timeouts"] == 1 and out.timing["shard_retries"] == 1


def test_the_shard_deadline_setting():
    gw, _ = _gateway(FakeReplicas(), shard_retries=3)
    assert gw.shard_timeout(300.0) == 75.0  # default: the request's deadline shared by the 4 sends
    assert gw.shard_timeout(20.0) == 5.0  # a client's shorter X-Kronos-Timeout-S shortens it too
    gw, _ = _gateway(FakeReplicas(), shard_timeout_s=30.0)
    assert gw.shard_timeout(300.0) == 30.0 and gw.shard_timeout(10.0) == 10.0
    assert _gateway(FakeReplicas(), num_replicas=1, shard_timeout_s=30.0)[0].shard_timeout(300.0) is None
    assert _gateway(FakeReplicas(), shard_retries=0)[0].shard_timeout(300.0) is None
