"""The replica's step runner (``service.replica.step_runner.StepRunner``) carrying out the
scheduler's plan over fake step-at-a-time engine jobs: preemption at step boundaries, state kept
across it, cancellation frees the job, out-of-memory halves lose nothing, coalescing within the wait
and the token cap, reports."""

import numpy as np
import pytest
import torch
from service_fakes import FakePredictor, FakeResult, FakeStats, make_options, make_shard

from service.replica.step_runner import StepRunner


class FakeStepJob:
    """A ``ForecastJob``: one decode step per ``step()``; forecast = each series' last close."""

    def __init__(self, engine, series, options, oom_at_step=None):
        self.engine, self.options, self.series = engine, options, series
        self.rows = len(series) * options.sample_count
        self.steps_left, self.done, self.closed = options.horizon, False, False
        self.oom_at_step = oom_at_step
        self.tag = float(series[0][-1, 3])  # the first series' close names the job in the log

    def step(self):
        assert not self.closed and not self.done
        if (
            self.oom_at_step is not None
            and self.options.horizon - self.steps_left == self.oom_at_step
        ):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.engine.log.append((self.tag, len(self.series)))
        self.steps_left -= 1
        self.done = self.steps_left == 0

    @property
    def shares_steps(self) -> bool:
        """Past its first step (its prefill), when its engine shares steps."""
        return self.engine.sharing and not self.done and self.steps_left < self.options.horizon

    def close(self):
        self.closed = True
        self.engine.closed.append(self.tag)

    def result(self):
        assert self.done
        o = self.options
        last = np.stack([s[-1] for s in self.series]).astype(np.float32)  # (B, 6)
        # (B, S, H, 6)
        paths = np.repeat(last[:, None, None, :], o.sample_count, 1).repeat(o.horizon, 2)
        mean = paths.mean(1)
        q = (
            np.stack([mean * (1 + lv) for lv in o.quantiles])
            if o.quantiles
            else np.zeros((0, *mean.shape))
        )
        return FakeResult(paths, mean, q, FakeStats(self.rows * o.horizon))


class FakeSteppingEngine(FakePredictor):
    """A ``ForecastEngine`` with ``start_forecast``; ``oom_above``: starting more series runs out of
    memory;
    ``oom_step``: a job of more than ``oom_step[0]`` series runs out of memory at step
        ``oom_step[1]``."""

    def __init__(self, oom_above=None, oom_step=None, sharing=False, shared_oom=False):
        super().__init__(oom_above=oom_above, oom="cuda")
        self.oom_step = oom_step
        self.sharing = sharing  # its jobs share decode steps after their first
        self.shared_oom = shared_oom  # the first shared step runs out of memory
        self.shared: list[tuple[float, ...]] = []  # job tags of every shared step
        self.log: list[tuple[float, int]] = []  # (job tag, series) of every step run
        self.closed: list[float] = []
        self.started: list[int] = []

    def start_forecast(self, series, x_ts, y_ts, options, *, series_keys=None, price_limits=None):
        self.started.append(len(series))
        if self.oom_above is not None and len(series) > self.oom_above:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        oom_at = self.oom_step[1] if self.oom_step and len(series) > self.oom_step[0] else None
        return FakeStepJob(self, series, options, oom_at)

    def step_together(self, jobs):
        assert len(jobs) > 1 and all(job.shares_steps for job in jobs)
        if self.shared_oom:
            self.shared_oom = False
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.shared.append(tuple(job.tag for job in jobs))
        for job in jobs:
            job.step()


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def runner(engine, **kw) -> StepRunner:
    return StepRunner(engine, "r1", "cpu", **kw)


def collect(results):
    return lambda res: results.append(res)


def test_a_small_shard_arriving_mid_job_runs_first_and_the_big_job_resumes_with_its_state():
    engine, out = FakeSteppingEngine(), []
    r = runner(engine, max_skipped=100)
    r.submit(
        make_shard(50, index=0, start=1000, options=make_options(horizon=6), request_id="big"),
        collect(out),
    )
    for _ in range(3):
        r.tick()
    r.submit(
        make_shard(
            2, index=0, start=5, options=make_options(horizon=3, seed=1), request_id="small"
        ),
        collect(out),
    )
    r.run_until_idle()
    assert [tag for tag, _ in engine.log] == [1000] * 3 + [5] * 3 + [1000] * 3
    assert [res.request_id for res in out] == ["small", "big"]
    np.testing.assert_allclose(out[0].mean[:, 0, 0], [5, 6])
    np.testing.assert_allclose(out[1].mean[:, 0, 0], np.arange(1000, 1050))
    # every job's memory freed
    assert engine.started == [50, 2] and sorted(engine.closed) == [5, 1000]
    small, big = r.take_reports()
    assert small.admitted_mid_batch == 1 and big.admitted_mid_batch == 0
    assert (small.decode_steps, small.step_rows, big.decode_steps, big.step_rows) == (3, 2, 6, 50)
    assert big.tokens_generated == 50 * 6 and len(small.queue_wait_s) == 1 and small.shards == 1


def test_shards_arriving_together_coalesce_into_one_job_within_the_wait_and_the_token_cap():
    engine, clock, out = FakeSteppingEngine(), Clock(), []
    r = runner(engine, batch_wait_timeout_s=0.01, clock=clock, max_batch_tokens=5 * (10 + 4))
    for i in range(2):
        r.submit(make_shard(2, index=i, start=10 * i), collect(out))
    assert r.next_wakeup() == 0.01 and not r.tick()  # still coalescing: 4 series, the cap holds 5
    clock.t = 0.005
    r.submit(make_shard(2, index=2, start=20), collect(out))
    assert r.next_wakeup() == 0.0  # the cap is reached: no need to wait longer
    r.run_until_idle()
    assert sorted(engine.started) == [2, 4]  # two jobs of whole shards within the cap
    assert sorted(res.index for res in out) == [0, 1, 2]
    by_index = {res.index: res for res in out}
    np.testing.assert_allclose(by_index[2].mean[:, 0, 0], [20, 21])
    waits = sorted(w for rep in r.take_reports() for w in rep.queue_wait_s)
    assert waits == [0.0, 0.005, 0.005]


def test_shards_within_the_wait_share_one_job():
    engine, clock, out = FakeSteppingEngine(), Clock(), []
    r = runner(engine, batch_wait_timeout_s=0.01, clock=clock)
    for i in range(3):
        r.submit(make_shard(2, index=i, start=10 * i), collect(out))
    clock.t = 0.01
    r.run_until_idle()
    assert engine.started == [6] and len(out) == 3


def test_different_options_make_different_jobs():
    engine, out = FakeSteppingEngine(), []
    r = runner(engine)
    r.submit(make_shard(2, 0), collect(out))
    r.submit(make_shard(3, 1, options=make_options(seed=7)), collect(out))
    r.run_until_idle()
    assert sorted(engine.started) == [2, 3] and sorted(res.index for res in out) == [0, 1]


def test_a_cancelled_shard_leaves_at_the_next_step_and_its_job_is_closed():
    engine, out = FakeSteppingEngine(), []
    r = runner(engine)
    big = r.submit(make_shard(8, 0, start=100, options=make_options(horizon=10)), collect(out))
    r.tick()
    r.tick()
    r.cancel(big)
    r.tick()
    assert engine.closed == [100] and len(engine.log) == 2 and not r.jobs and r.scheduler.idle
    assert out == [] and r.next_wakeup() is None


def test_a_job_with_one_shard_cancelled_keeps_running_for_the_others():
    engine, out = FakeSteppingEngine(), []
    r = runner(engine)
    gone = r.submit(make_shard(2, 0, start=0), collect(out))
    r.submit(make_shard(2, 1, start=10), collect(out))
    r.tick()
    r.cancel(gone)
    r.run_until_idle()
    # the cancelled shard's answer goes nowhere: its caller left
    assert [res.index for res in out] == [1]
    assert engine.started == [4]


def test_out_of_memory_at_start_splits_into_halves_and_loses_nothing():
    engine, out = FakeSteppingEngine(oom_above=2), []
    r = runner(engine)
    opts = make_options(quantiles=(0.1, 0.9))
    r.submit(make_shard(3, 0, start=0, options=opts, return_paths=True), collect(out))
    r.submit(make_shard(4, 1, start=10, options=opts, return_paths=True), collect(out))
    r.run_until_idle()
    assert engine.started[0] == 7 and sorted(engine.started[1:]) == [1, 2, 2, 2, 3, 4]
    by_index = {res.index: res for res in out}
    np.testing.assert_allclose(by_index[0].mean[:, 0, 0], [0, 1, 2])
    np.testing.assert_allclose(by_index[1].mean[:, 0, 0], [10, 11, 12, 13])
    assert by_index[1].quantiles.shape == (2, 4, 4, 6) and by_index[1].paths.shape == (4, 1, 4, 6)
    assert sum(rep.oom_splits for rep in r.take_reports()) >= 2


def test_out_of_memory_mid_decode_discards_the_job_and_reruns_its_halves():
    engine, out = FakeSteppingEngine(oom_step=(3, 2)), []
    r = runner(engine)
    r.submit(make_shard(6, 0, start=0), collect(out))
    r.run_until_idle()
    # the failed job was closed too
    assert engine.started == [6, 3, 3] and engine.closed.count(0) == 2
    np.testing.assert_allclose(out[0].mean[:, 0, 0], np.arange(6))


def test_a_single_series_that_does_not_fit_fails_only_its_shard():
    engine, out = FakeSteppingEngine(oom_above=0), []
    r = runner(engine)
    r.submit(make_shard(2, 0), collect(out))
    r.run_until_idle()
    assert len(out) == 1 and out[0].error.startswith("OutOfMemoryError") and out[0].mean is None


def test_other_errors_fail_the_shards_without_splitting():
    class Broken(FakeSteppingEngine):
        def start_forecast(self, series, *a, **kw):
            self.started.append(len(series))
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x6 and 7x8)")

    engine, out = Broken(), []
    r = runner(engine)
    r.submit(make_shard(4, 0), collect(out))
    r.run_until_idle()
    assert engine.started == [4] and out[0].error.startswith("RuntimeError: mat1")
    assert [rep.oom_splits for rep in r.take_reports()] == [0]


def test_admission_waits_for_the_memory_budget():
    engine, out = FakeSteppingEngine(), []
    r = runner(
        engine, budget_bytes=100, memory_model=lambda options, lengths: (10 * len(lengths), 0),
        max_batch_tokens=14 * 8,
    )
    r.submit(make_shard(8, 0, start=0, options=make_options(horizon=3)), collect(out))
    r.tick()
    # 80 + 30 > 100
    r.submit(make_shard(3, 1, start=50, options=make_options(horizon=3, seed=2)), collect(out))
    r.tick()
    assert engine.started == [8]
    r.run_until_idle()
    assert engine.started == [8, 3] and len(out) == 2


def test_jobs_are_cut_to_the_prefill_cap_and_the_shards_put_back_together():
    engine, out = FakeSteppingEngine(), []
    r = runner(engine, max_prefill_tokens=3 * 10)  # three series of 10 candles per job
    r.submit(make_shard(4, 0, start=0), collect(out))
    r.submit(make_shard(4, 1, start=10), collect(out))
    r.run_until_idle()
    # each shard is cut 3 + 1; the first's last job takes none of the second
    assert sorted(engine.started) == [1, 1, 3, 3]
    by_index = {res.index: res for res in out}
    np.testing.assert_allclose(by_index[0].mean[:, 0, 0], [0, 1, 2, 3])
    np.testing.assert_allclose(by_index[1].mean[:, 0, 0], [10, 11, 12, 13])


def test_a_small_shard_beside_part_of_a_big_one_gets_a_job_of_its_own_and_runs_first():
    """Arriving together with the same options, the small shard is not the tail of a job of the
    big one's series: its own job (least work) runs first."""
    engine, out = FakeSteppingEngine(), []
    r = runner(engine, max_prefill_tokens=4 * 10, max_skipped=100)
    r.submit(make_shard(10, 0, start=1000, request_id="big"), collect(out))
    r.submit(make_shard(2, 0, start=5, request_id="small"), collect(out))
    r.submit(make_shard(1, 0, start=7, request_id="tiny"), collect(out))
    r.run_until_idle()
    # big: 4 + 4 + 2, its last job closed to others; small and tiny share a job of 3 series
    assert sorted(engine.started) == [2, 3, 4, 4]
    assert [res.request_id for res in out] == ["small", "tiny", "big"]


def _three_jobs(r, out):
    """A 10-series job (horizon 6) decoding, then a 2-series and a 5-series one (horizon 4, other
    options: three jobs)."""
    r.submit(make_shard(10, 0, start=1000, options=make_options(horizon=6), request_id="big"),
             collect(out))
    r.tick()  # big's prefill
    r.submit(make_shard(2, 0, start=5, options=make_options(seed=1), request_id="small"),
             collect(out))
    r.submit(make_shard(5, 0, start=50, options=make_options(seed=2), request_id="mid"),
             collect(out))


@pytest.mark.parametrize("cap", [11, 12, 100])
def test_a_preempted_job_rides_along_the_steps_of_the_job_that_preempted_it_within_the_cap(cap):
    engine, out = FakeSteppingEngine(sharing=True), []
    r = runner(engine, max_step_rows=cap, max_skipped=100)
    _three_jobs(r, out)
    r.run_until_idle()
    # small (least work) prefills, then its 3 decode steps take big in (2 + 10 rows) when the cap
    # allows; then big's work (2 steps x 10 rows) ties mid's (4 x 5): mid, cut from the smaller
    # shard, goes first, its prefill alone and its decode steps taking big in (5 + 10 rows) when
    # the cap allows
    shared = 3 if cap >= 12 else 0
    with_mid = 2 if cap >= 15 else 0
    assert engine.shared == [(5, 1000)] * shared + [(50, 1000)] * with_mid
    assert {res.request_id for res in out} == {"big", "small", "mid"}
    reports = {rep.series: rep for rep in r.take_reports()}
    assert [reports[n].shared_steps for n in (2, 5, 10)] == [shared, with_mid, shared + with_mid]
    assert [reports[n].decode_steps for n in (2, 5, 10)] == [4, 4, 6]
    np.testing.assert_allclose(
        next(res for res in out if res.request_id == "big").mean[:, 0, 0], np.arange(1000, 1010)
    )


def test_no_step_is_shared_when_the_cap_is_zero():
    engine, out = FakeSteppingEngine(sharing=True), []
    r = runner(engine, max_step_rows=0)
    _three_jobs(r, out)
    r.run_until_idle()
    assert engine.shared == [] and len(out) == 3


def test_out_of_memory_in_a_shared_step_halves_every_job_in_it_and_loses_nothing():
    engine, out = FakeSteppingEngine(sharing=True, shared_oom=True), []
    r = runner(engine, max_step_rows=100)
    _three_jobs(r, out)
    r.run_until_idle()
    assert {res.request_id for res in out} == {"big", "small", "mid"}
    assert all(res.error is None for res in out)
    by_id = {res.request_id: res for res in out}
    np.testing.assert_allclose(by_id["small"].mean[:, 0, 0], [5, 6])
    np.testing.assert_allclose(by_id["big"].mean[:, 0, 0], np.arange(1000, 1010))
    # the two jobs of the failed step (small, big) were halved; mid was not in it
    assert sum(rep.oom_splits for rep in r.take_reports()) == 2
    assert engine.started.count(1) == 2 and engine.started.count(5) == 3  # the halves, and mid


@pytest.mark.parametrize("within", [False, True])
def test_a_requests_jobs_share_a_step_with_each_other_only_when_the_policy_lets_them(within):
    """A big request cut into three jobs (4 + 4 + 2 series) and a small request: the small job rides
    beside a big job either way; the big request's own jobs step together only with
    ``share_within_request`` (the CPU default is not to)."""
    engine, out = FakeSteppingEngine(sharing=True), []
    r = runner(engine, max_step_rows=100, max_prefill_tokens=4 * 10, max_skipped=100,
               share_within_request=within)
    big = make_options(horizon=8)
    r.submit(make_shard(10, 0, start=1000, options=big, request_id="big"), collect(out))
    r.tick()
    r.tick()  # two parts prefilled (the second ahead of its turn)
    r.submit(make_shard(2, 0, start=5, options=big, request_id="small"), collect(out))
    r.run_until_idle()
    parts = {1000.0, 1004.0, 1008.0}  # the big jobs' tags (their first series' close)
    assert any(len(parts & set(step)) > 1 for step in engine.shared) == within
    assert any(5.0 in step and parts & set(step) for step in engine.shared)
    assert {res.request_id for res in out} == {"big", "small"}
    assert all(res.error is None for res in out)
