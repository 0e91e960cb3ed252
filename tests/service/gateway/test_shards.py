"""Stage shards (``service.gateway.shards``): contiguous shards in request order, sized by the
engine's memory model and the token budget."""

import asyncio

import pytest
from service_fakes import (
    FakeReplicas,
    FakeStore,
    fake_future,
    fake_gateway,
)

from kronos_core.engine.memory import estimate_inference_bytes
from service.common.messages import ReplicaInfo
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.future import FutureTimestamps
from service.gateway.shards import TooLargeError, memory_model_fit, plan_shards


def _sizes(slices):
    return [s.stop - s.start for s in slices]


def test_plan_covers_request_in_order():
    slices = plan_shards(
        [100] * 1000, 10, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=2
    )
    assert _sizes(slices) == [250] * 4
    assert slices[0].start == 0 and slices[-1].stop == 1000
    assert all(a.stop == b.start for a, b in zip(slices, slices[1:], strict=False))


def test_plan_capped_by_memory_model_of_longest_series():
    seen = []

    def fit(lookback):
        seen.append(lookback)
        return 7

    slices = plan_shards([5, 50, 20] * 10, 4, 3, fit=fit, num_replicas=1, shards_per_replica=1)
    assert seen == [50]
    assert max(_sizes(slices)) == 7 and sum(_sizes(slices)) == 30


def test_plan_capped_by_token_budget():
    # each series: 2 samples x (10 + 5) = 30 tokens; 100 tokens -> 3 series per shard
    slices = plan_shards(
        [10] * 10, 5, 2, fit=lambda L: 1000, num_replicas=1, shards_per_replica=1,
        max_batch_tokens=100,
    )
    assert _sizes(slices) == [3, 3, 3, 1]  # shards of 3


def test_plan_rejects_a_series_that_cannot_fit():
    with pytest.raises(TooLargeError, match="lookback=64"):
        plan_shards([64], 8, 1, fit=lambda L: 0, num_replicas=1)
    with pytest.raises(TooLargeError, match="token budget"):
        plan_shards([64], 8, 1, fit=lambda L: 10, num_replicas=1, max_batch_tokens=50)


def test_plan_empty_and_tiny():
    assert plan_shards([], 4, 1, fit=lambda L: 1, num_replicas=2) == []
    assert _sizes(plan_shards([3], 4, 1, fit=lambda L: 10, num_replicas=4)) == [1]


def test_plan_with_room_for_exactly_one_series_per_shard():
    """A replica that fits one long series (memory or token budget) still gets work, one each."""
    assert _sizes(
        plan_shards([64] * 3, 8, 1, fit=lambda L: 1, num_replicas=1, shards_per_replica=1)
    ) == [1, 1, 1]
    # 72 tokens per series, budget 72: exactly one
    assert _sizes(
        plan_shards(
            [64] * 3, 8, 1, fit=lambda L: 99, num_replicas=1, shards_per_replica=1,
            max_batch_tokens=72,
        )
    ) == [1, 1, 1]
    with pytest.raises(TooLargeError, match="does not fit one replica's device budget"):
        plan_shards([64], 8, 1, fit=lambda L: 0, num_replicas=1)


def test_plan_one_replica_one_shard_and_the_default_split():
    assert _sizes(
        plan_shards([10] * 5, 4, 1, fit=lambda L: 99, num_replicas=1, shards_per_replica=1)
    ) == [5]
    # default: two shards per replica
    assert _sizes(plan_shards([10] * 12, 4, 1, fit=lambda L: 99, num_replicas=2)) == [3, 3, 3, 3]


def test_shards_sized_by_memory_model():
    gw, m, reps = fake_gateway()
    out = asyncio.run(
        gw.forecast(ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=2))
    )
    assert out.timing["shards"] == 7  # fit() = 3 series per shard: six of 3, then the last 2
    assert reps.calls == 7 and len(out.symbols) == 20


def _tiny_info(tiny, budget: int, max_context: int = 64) -> ReplicaInfo:
    return ReplicaInfo(
        "fake-replica", "cpu", budget, 1 << 30, max_context, tiny[0].config, tiny[1].config,
        {"name": "fake", "bundled": True},
    )


@pytest.mark.parametrize(
    "lookback, horizon, samples, context",
    [(62, 2, 1, 64), (300, 24, 4, 512), (300, 64, 2, 128), (700, 16, 2, 256)],
)
def test_memory_model_fit_inverts_the_engine_estimate(tiny, lookback, horizon, samples, context):
    """The real ``memory_model_fit``: with a budget of exactly k series' estimate (at the
    replica's own max_context) it fits k."""
    m, t = tiny[0].config, tiny[1].config
    for k in (1, 7):
        budget = estimate_inference_bytes(m, t, k, lookback, horizon, samples, max_context=context)
        fit = memory_model_fit(_tiny_info(tiny, budget, max_context=context), horizon, samples)
        assert fit(lookback) == k
        assert (
            estimate_inference_bytes(m, t, k + 1, lookback, horizon, samples, max_context=context)
            > budget
        )
        assert fit(lookback + 100) <= k  # longer windows fit no more
    # precondition: here the replica's context changes the answer
    if (lookback, context) == (300, 128):
        assert (
            estimate_inference_bytes(m, t, 7, lookback, horizon, samples, max_context=512) > budget
        )


def test_gateway_sizes_shards_with_the_real_memory_model(tiny):
    """No fit_factory given: the gateway cuts shards with ``memory_model_fit`` from the
    replica's budget; a budget of 3 series' estimate gives shards of at most 3 series."""
    horizon = 2
    lookback = 64 - horizon  # the default lookback: max_context - horizon
    budget = estimate_inference_bytes(
        tiny[0].config, tiny[1].config, 3, lookback, horizon, 1, max_context=64
    )
    sizes = []

    class Sizing(FakeReplicas):
        async def forecast_shard(self, shard):
            sizes.append(shard.size)
            return await super().forecast_shard(shard)

    reps = Sizing(info=_tiny_info(tiny, budget))
    gw = ForecastPipeline(
        Settings(max_context=64, shards_per_replica=1), FakeStore(), reps, Metrics(),
        num_replicas=1, future=FutureTimestamps(fake_future),
    )
    out = asyncio.run(
        gw.forecast(ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=horizon))
    )
    assert len(out.symbols) == 20 and out.timing["lookback"] == lookback
    assert sizes == [3] * 6 + [2] and out.timing["shards"] == 7


def test_a_small_request_is_not_cut_into_slivers_below_min_shard_tokens():
    # 5 series of lookback 200: 1,000 history tokens, under the 2,048 floor: one shard, not five
    assert _sizes(
        plan_shards(
            [200] * 5, 24, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=8,
            min_shard_tokens=2048,
        )
    ) == [5]
    # 100 series: shards of at least ceil(2048 / 200) = 11 series (not the 7 the shard target gives)
    sizes = _sizes(
        plan_shards(
            [200] * 100, 24, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=8,
            min_shard_tokens=2048,
        )
    )
    assert sizes[:5] == [11] * 5 and set(sizes[5:]) <= {11, 10, 1} and sum(sizes) == 100
    # sample paths count: 2 paths each halve the series a shard needs; memory still caps it
    assert (
        _sizes(
            plan_shards(
                [200] * 100, 24, 2, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=8,
                min_shard_tokens=2048,
            )
        )[0]
        == 7
    )
    assert _sizes(
        plan_shards([200] * 5, 24, 1, fit=lambda L: 2, num_replicas=2, min_shard_tokens=2048)
    ) == [2, 2, 1]


def test_shards_are_cut_even_and_placement_is_the_router_s():
    # 1,000 series, 2 replicas x 8 shards: shards of 63, the remainder last; no shard is halved to
    # even out the end of a request: the least-tokens router places each shard
    # (service.replica.router)
    sizes = _sizes(
        plan_shards(
            [200] * 1000, 24, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=8,
            min_shard_tokens=2048,
        )
    )
    assert sizes == [63] * 15 + [55]
    # not below the floor of min_shard_tokens
    assert set(
        _sizes(
            plan_shards(
                [200] * 100, 24, 1, fit=lambda L: 10_000, num_replicas=2, shards_per_replica=2,
                min_shard_tokens=4000,
            )
        )
    ) == {25}
    assert _sizes(plan_shards([10] * 12, 4, 1, fit=lambda L: 99, num_replicas=2)) == [3, 3, 3, 3]
