"""A CPU replica's step loops as processes (``service.replica.loop_processes``), on the test
session's real Ray: child actors of the replica class, one loop each, placed by tokens in flight.
Seeded paths equal the library's whichever child runs them; a cancelled call leaves no rows behind
in the child; a live user_config reaches every child; a child that dies fails only the calls
that need it, with a message that names it, and makes the replica unhealthy. Then the real
deployment in Serve: a replica on two CPUs starts two loop processes and answers as the library
does.

The live service's own replicas have one CPU, hence one loop and no child process; these tests
deploy beside it, holding no CPU of the session (the children take none either)."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY

from kronos_core.base.options import ForecastOptions
from service.common.messages import Shard
from service.common.settings import Settings


def _seeded_shard(series: int, horizon: int = 6, length: int = 40, request_id: str = "r"):
    """A seeded shard of ``series`` random-walk series, paths shipped back."""
    options = ForecastOptions(horizon=horizon, sample_count=3, seed=11)
    rng = np.random.default_rng(3)
    values = [
        np.abs(100 + np.cumsum(rng.normal(0, 1, (length, 6)), 0)).astype(np.float32)
        for _ in range(series)
    ]
    ts = pd.date_range("2024-01-01", periods=length + horizon, freq="h").to_numpy()
    shard = Shard(request_id, 0, values, [ts[:length]] * series, [ts[length:]] * series, options,
                  return_paths=True)
    return shard, options


def _library_paths(shard, options) -> np.ndarray:
    from kronos_core.loading import PredictorConfig, load_predictor

    predictor = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    return predictor.forecast(shard.values, shard.x_timestamps, shard.y_timestamps, options).paths


def _in_child(child, fn):
    """``fn(replica)`` run inside a child (a test module's functions do not import there: ``fn`` is
    a lambda or a nested function, which Ray pickles by value)."""
    import ray

    return ray.get(child.__ray_call__.remote(fn), timeout=60)


@pytest.fixture(scope="module")
def loop_processes(live_service):
    """Two loop processes of the replica class, made from this (driver) process."""
    from service.replica.loop_processes import LoopProcesses
    from service.replica.loop_worker import LoopWorker

    processes = LoopProcesses(
        LoopWorker, Settings(model_dir=TINY, device="cpu"), "test-replica",
        loops=2, cpus_per_loop=1, budget_per_loop=1 << 30,
    )
    yield processes
    processes.stop()


def test_two_loop_processes_answer_with_the_librarys_seeded_paths_whichever_runs_them(
    loop_processes,
):
    children = loop_processes.children
    pids = {_in_child(c, lambda self: os.getpid()) for c in children}
    assert len(pids) == 2 and os.getpid() not in pids
    # each child is a one-loop replica on one torch thread, with the budget it was given
    assert [
        _in_child(c, lambda self: (self.step_loops, self.torch_threads, self.budget))
        for c in children
    ] == [(1, 1, 1 << 30)] * 2
    info = loop_processes.info()
    assert (info.replica_id, info.step_loops, info.budget_bytes) == ("test-replica", 2, 1 << 30)
    shard, options = _seeded_shard(4)

    def record_submits(replica) -> None:
        """Record the request id of every shard the child's runner receives."""
        runner = replica.loops.runners[0]
        submit = runner.submit
        replica.submitted = []

        def recording(shard, on_done):
            replica.submitted.append(shard.request_id)
            return submit(shard, on_done)

        runner.submit = recording

    for c in children:
        _in_child(c, record_submits)

    async def both():
        return await asyncio.gather(
            loop_processes.forecast_shard(shard), loop_processes.forecast_shard(shard)
        )

    a, b = asyncio.run(both())
    assert a.error is None and b.error is None
    # one each: the second went to the child with fewer tokens in flight
    assert [_in_child(c, lambda self: self.submitted) for c in children] == [["r"], ["r"]]
    np.testing.assert_array_equal(a.paths, b.paths)
    np.testing.assert_array_equal(a.paths, _library_paths(shard, options))
    # the children's batch reports come back with the result, naming the replica called
    assert a.reports and {r.replica_id for r in a.reports + b.reports} == {"test-replica"}
    assert loop_processes.tokens_in_flight() == [0, 0]


def test_a_live_user_config_reaches_every_loop_process(loop_processes):
    asyncio.run(loop_processes.reconfigure({"max_step_rows": 8, "batch_wait_timeout_s": 0.001}))
    policies = [
        _in_child(c, lambda self: (
            self.loops.runners[0].policy.max_step_rows,
            self.loops.runners[0].policy.batch_wait_timeout_s,
        ))
        for c in loop_processes.children
    ]
    assert policies == [(8, 0.001), (8, 0.001)]
    asyncio.run(loop_processes.reconfigure({}))


def test_a_cancelled_call_leaves_no_rows_in_its_loop_process(loop_processes):
    # ~13 s of one core uncancelled (so the child is idle within 4 s only if the cancel reached it)
    shard, _ = _seeded_shard(96, horizon=200, length=200, request_id="long")

    async def cancel_soon():
        task = asyncio.ensure_future(loop_processes.forecast_shard(shard))
        await asyncio.sleep(1.5)
        assert not task.done(), "the long shard finished before it could be cancelled"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    assert loop_processes.tokens_in_flight() == [0, 0]
    deadline = time.monotonic() + 4
    held: list = []
    while time.monotonic() < deadline:
        held = [
            _in_child(c, lambda self: (self.loops.tokens_in_flight(),
                                       self.loops.runners[0].scheduler.idle))
            for c in loop_processes.children
        ]
        if held == [([0], True)] * 2:
            break
        time.sleep(0.2)
    assert held == [([0], True)] * 2


def _kill(child) -> None:
    """End a child and wait until Ray reports it dead (``ray.kill`` returns before it is)."""
    import ray
    from ray.exceptions import RayActorError

    ray.kill(child)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(child.__ray_ready__.remote(), timeout=10)
        except RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed child still answers after 60 s")


def test_a_dead_loop_process_fails_only_the_calls_that_need_it_and_the_replica_turns_unhealthy(
    live_service,
):
    from service.replica.loop_processes import LoopProcessDied, LoopProcesses
    from service.replica.loop_worker import LoopWorker

    processes = LoopProcesses(
        LoopWorker, Settings(model_dir=TINY, device="cpu"), "doomed-replica",
        loops=2, cpus_per_loop=1, budget_per_loop=1 << 30,
    )
    try:
        shard, options = _seeded_shard(2)
        _kill(processes.children[0])
        with pytest.raises(LoopProcessDied, match="doomed-replica: step-loop process 0 ended"):
            asyncio.run(processes.check_health(10))
        # the live one answers every call meanwhile
        for _ in range(2):
            res = asyncio.run(processes.forecast_shard(shard))
            assert res.error is None
        _kill(processes.children[1])
        with pytest.raises(LoopProcessDied, match="step-loop process 1 ended"):
            asyncio.run(processes.forecast_shard(shard))
        with pytest.raises(LoopProcessDied, match="process 0 ended.*process 1 ended"):
            asyncio.run(processes.forecast_shard(shard))
        assert processes.tokens_in_flight() == [0, 0]
    finally:
        processes.stop()


def test_a_serve_replica_on_two_cpus_runs_its_loops_as_processes(live_service):
    from ray import serve

    from service.replica.deployment import Predictor

    app = "loop-processes"
    deployment = Predictor.options(  # type: ignore[attr-defined]
        name="LoopProcessReplica", num_replicas=1, ray_actor_options={"num_cpus": 0}
    )
    handle = serve.run(
        deployment.bind(Settings(model_dir=TINY, device="cpu", replica_cpus=2)),
        name=app, route_prefix=None,
    )
    try:
        info = handle.describe.remote().result(timeout_s=120)
        assert info.step_loops == 2 and info.device == "cpu"
        shard, options = _seeded_shard(3)
        res = handle.forecast_shard.remote(shard).result(timeout_s=120)
        assert res.error is None
        np.testing.assert_array_equal(res.paths, _library_paths(shard, options))
        assert {r.replica_id for r in res.reports} == {info.replica_id}
    finally:
        serve.delete(app)
