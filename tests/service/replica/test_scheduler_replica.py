"""The predictor replica's step loop (``service.replica.deployment``) outside Serve, on the
reference fixture
checkpoint: it warms up before it is ready, answers shards through the step scheduler, lets a small
    shard
overtake a big job, and frees a cancelled shard's job at the next step."""

from __future__ import annotations

import asyncio
import time

import pytest
from fixture_paths import TINY
from service_fakes import make_options, make_shard

from service.common.settings import Settings
from service.replica.deployment import Predictor


@pytest.fixture(scope="module")
def replica():
    # one step loop: the scenario is the scheduler's, within one loop (placement over several
    # loops: test_step_loop.py)
    rep = Predictor.func_or_class(Settings(model_dir=TINY, device="cpu", cpu_step_loops=1))
    yield rep
    rep.core.stop()


def test_the_replica_warmed_up_before_it_was_ready(replica):
    assert replica.core.warmup_seconds > 0 and replica.core.loops.alive
    # the warm-up is not reported
    runner = replica.core.loops.runners[0]
    assert runner.take_reports() == [] and runner.scheduler.idle


def test_a_small_shard_overtakes_a_big_job_and_a_cancelled_shard_frees_its_job(replica):
    async def scenario():
        big = asyncio.ensure_future(replica.forecast_shard(
            make_shard(48, length=100, options=make_options(horizon=60, seed=2), request_id="big")))
        while not replica.core.loops.runners[0].scheduler.live:  # the big job is decoding
            await asyncio.sleep(0.005)
        small = await replica.forecast_shard(
            make_shard(2, length=50, options=make_options(horizon=4), request_id="small")
        )
        assert not big.done()  # it finished first, admitted mid-batch
        assert sum(r.admitted_mid_batch for r in small.reports) == 1
        big.cancel()
        with pytest.raises(asyncio.CancelledError):
            await big
        deadline = time.monotonic() + 10
        while replica.core.loops.runners[0].jobs and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return small

    small = asyncio.run(scenario())
    assert small.error is None and small.mean.shape == (2, 4, 6)
    # the big job left, its memory freed
    assert not replica.core.loops.runners[0].jobs and replica.core.loops.runners[0].scheduler.idle
    asyncio.run(replica.check_health())  # the front asks its loops
