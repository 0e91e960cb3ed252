"""The replica's device loop thread (``service.replica.deployment.DeviceLoop``): it builds the
runner on its own thread (so every torch call of a replica, the model's loading and warm-up
included, runs on one thread), drives it, and hands a failed build back to the constructor."""

from __future__ import annotations

import threading

import pytest
from service_fakes import FakePredictor, make_shard

from service.replica.deployment import DeviceLoop
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

    loop = DeviceLoop(build)
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
        DeviceLoop(build)
    started = [t for t in threading.enumerate() if t not in before]
    for t in started:
        t.join(10)
    assert not [t for t in started if t.is_alive() and t.name == "kronos-device-loop"]
