"""The replica's step loop threads (``service.replica.step_loop``): a loop builds its runner on
its own thread (so every torch call of the loop, the model's loading and warm-up included, runs on
one thread), drives it, and hands a failed build back to the constructor; ``StepLoops`` places
each shard on the loop with the fewest tokens in flight. A real replica on two CPUs runs two
single-thread loops whose seeded paths do not depend on the loop."""

from __future__ import annotations

import threading

import pytest
from service_fakes import FakePredictor, make_shard

from service.replica.step_loop import StepLoop, StepLoops
from service.replica.step_runner import StepRunner


class ThreadRecordingPredictor(FakePredictor):
    """Records the thread of every forecast it runs."""

    def __init__(self):
        super().__init__()
        self.threads: list[threading.Thread] = []

    def forecast(self, *args, **kwargs):
        self.threads.append(threading.current_thread())
        return super().forecast(*args, **kwargs)


def test_the_loop_builds_its_runner_on_its_own_thread_and_runs_every_job_there():
    predictor = ThreadRecordingPredictor()
    built_on: list[threading.Thread] = []

    def build() -> StepRunner:
        built_on.append(threading.current_thread())
        runner = StepRunner(predictor, "r1", "cpu")
        warm: list = []
        runner.submit(make_shard(2, request_id="warm-up"), warm.append)
        runner.run_until_idle()  # the warm-up, as the replica runs it in its build
        assert warm and warm[0].error is None
        return runner

    loop = StepLoop(build)
    try:
        assert built_on == [loop.thread] and loop.thread is not threading.current_thread()
        assert loop.runner is not None and loop.alive
        answered = threading.Event()
        results: list = []

        def deliver(res) -> None:
            results.append(res)
            answered.set()

        loop.runner.submit(make_shard(3, start=7.0, request_id="user"), deliver)
        assert answered.wait(30)
        assert results[0].request_id == "user" and results[0].error is None
        assert results[0].mean[:, 0, 0].tolist() == [7.0, 8.0, 9.0]
        # the warm-up and the user's job both ran on the loop's thread, none on the caller's
        assert predictor.threads == [loop.thread, loop.thread]
    finally:
        loop.stop()
        loop.thread.join(10)
    assert not loop.alive


def test_a_build_that_fails_raises_in_the_constructor_and_leaves_no_loop_running():
    def build() -> StepRunner:
        raise RuntimeError("checkpoint unreadable")

    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="checkpoint unreadable"):
        StepLoop(build)
    started = [t for t in threading.enumerate() if t not in before]
    for t in started:
        t.join(10)
    assert not [t for t in started if t.is_alive() and t.name.startswith("kronos-device-loop")]


def _fake_loops(n: int) -> StepLoops:
    return StepLoops(
        [
            StepLoop(lambda: StepRunner(FakePredictor(), "r1", "cpu"), name=str(k))
            for k in range(n)
        ]
    )


def test_each_shard_goes_to_the_loop_with_the_fewest_tokens_in_flight_until_released():
    loops = _fake_loops(2)
    try:
        answered: list = []
        done = threading.Semaphore(0)

        def deliver(res) -> None:
            answered.append((res.request_id, threading.current_thread().name))
            done.release()

        big, small = make_shard(100, request_id="big"), make_shard(2, request_id="small")
        assert loops.least_loaded() == 0  # a tie: the first loop
        placed_big = loops.submit(loops.least_loaded(), big, deliver)
        assert loops.least_loaded() == 1
        placed_small = loops.submit(loops.least_loaded(), small, deliver)
        assert loops.tokens_in_flight() == [big.tokens, small.tokens]
        assert loops.least_loaded() == 1  # the small one's loop has less work
        assert done.acquire(timeout=30) and done.acquire(timeout=30)
        # each ran on its own loop's thread
        assert sorted(answered) == [
            ("big", loops.loops[0].thread.name), ("small", loops.loops[1].thread.name)
        ]
        loops.release(placed_big)
        assert loops.tokens_in_flight() == [0, small.tokens] and loops.least_loaded() == 0
        loops.release(placed_small)
        assert loops.tokens_in_flight() == [0, 0] and loops.alive
    finally:
        loops.stop()
        for loop in loops.loops:
            loop.thread.join(10)
    assert not loops.alive


def test_a_replica_needs_a_loop():
    with pytest.raises(ValueError, match="at least one step loop"):
        StepLoops([])


def test_a_replica_on_two_cpus_runs_one_single_thread_loop_per_cpu_and_paths_do_not_depend_on_it():
    """The real replica class outside Serve, on the reference fixture checkpoint: two CPUs give
    two loops of one torch thread (``cpu_step_loops=1``: one loop of two); a live user_config
    reaches both; two copies of one seeded shard, sent together, run on different loops and give
    the library's paths."""
    import asyncio

    import numpy as np
    from fixture_paths import TINY
    from service_fakes import make_options

    from kronos_core.loading import PredictorConfig, load_predictor
    from service.common.settings import Settings
    from service.replica.deployment import Predictor

    one = Predictor.func_or_class(
        Settings(model_dir=TINY, device="cpu", replica_cpus=2, cpu_step_loops=1)
    ).core  # outside Serve: its loops are threads of a LoopWorker in this process
    one.loops.stop()
    assert (one.step_loops, one.torch_threads, len(one.loops.loops)) == (1, 2, 1)

    front = Predictor.func_or_class(Settings(model_dir=TINY, device="cpu", replica_cpus=2))
    replica = front.core
    try:
        assert (replica.step_loops, replica.torch_threads) == (2, 1)
        assert len({loop.thread.name for loop in replica.loops.loops}) == 2 and replica.loops.alive
        # each loop plans for half of the memory beyond the weights
        assert replica.budget < 2 << 30
        # a live user_config reaches every loop's runner
        asyncio.run(front.reconfigure({"max_step_rows": 8, "batch_wait_timeout_s": 0.001}))
        assert [(r.policy.max_step_rows, r.policy.batch_wait_timeout_s)
                for r in replica.loops.runners] == [(8, 0.001), (8, 0.001)]
        ran_on: list[int] = []
        for k, runner in enumerate(replica.loops.runners):
            def recording_submit(shard, on_done, k=k, submit=runner.submit):
                ran_on.append(k)
                return submit(shard, on_done)

            runner.submit = recording_submit  # type: ignore[method-assign]
        options = make_options(horizon=6, sample_count=3, seed=11)
        rng = np.random.default_rng(3)
        shard = make_shard(4, length=40, options=options, return_paths=True)
        shard.values = [
            np.abs(100 + np.cumsum(rng.normal(0, 1, (40, 6)), 0)).astype(np.float32)
            for _ in shard.values
        ]

        async def both():
            calls = (front.forecast_shard(shard), front.forecast_shard(shard))
            return await asyncio.gather(*calls)

        a, b = asyncio.run(both())
    finally:
        replica.loops.stop()
    assert sorted(ran_on) == [0, 1]
    assert a.error is None and b.error is None
    np.testing.assert_array_equal(a.paths, b.paths)
    library = load_predictor(PredictorConfig(model=TINY, device="cpu")).forecast(
        shard.values, shard.x_timestamps, shard.y_timestamps, options
    )
    np.testing.assert_array_equal(a.paths, library.paths)
