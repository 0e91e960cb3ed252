"""The scheduler's rules that shape jobs and steps, without a model: which arriving shards form a
job (``coalesce_due``, ``group_arrivals``), how a job is cut for its prefill (``cut_for_prefill``),
and which live jobs share the next decode step (``NextStep.step``)."""

import pytest

from service.replica.scheduler import (
    Arrival,
    BatchTicket,
    Scheduler,
    coalesce_due,
    cut_for_prefill,
    group_arrivals,
    joining,
)


def test_shards_form_jobs_once_the_first_has_waited_or_they_fill_a_job():
    waiting = [Arrival("a", 10, arrived=1.0), Arrival("a", 10, arrived=1.002)]
    assert not coalesce_due(waiting, now=1.003, wait_s=0.005, max_tokens=100)
    assert coalesce_due(waiting, now=1.005, wait_s=0.005, max_tokens=100)  # the first waited
    assert coalesce_due(waiting, now=1.003, wait_s=0.005, max_tokens=20)  # a full job
    assert not coalesce_due([], now=9.0, wait_s=0.0, max_tokens=1)


def test_arrivals_group_by_options_within_the_token_cap_and_cancelled_ones_are_left_out():
    arrivals = [
        Arrival("a", 40, 0.0),
        Arrival("b", 10, 0.0),
        Arrival("a", 40, 0.0),
        Arrival("a", 40, 0.0, cancelled=True),
        Arrival("a", 30, 0.0),
        Arrival("b", 95, 0.0),
    ]
    # group "a": 40 + 40 fit 100, the next 30 would not; group "b": 10 + 95 would not
    assert group_arrivals(arrivals, max_tokens=100) == [[0, 2], [4], [1], [5]]
    # one shard bigger than the cap still forms a job of its own
    assert group_arrivals([Arrival("a", 500, 0.0)], max_tokens=100) == [[0]]


def test_a_job_is_cut_for_its_prefill_and_a_cut_shards_last_job_takes_no_other():
    # two small shards pack into one job
    assert cut_for_prefill([[10, 10], [10]], cap=40) == [[(0, 0, 2), (1, 0, 1)]]
    # a big shard (5 series of 10) cut at 20 tokens; the small one after it gets its own job
    assert cut_for_prefill([[10] * 5, [10]], cap=20) == [
        [(0, 0, 2)],
        [(0, 2, 4)],
        [(0, 4, 5)],  # the cut shard's last job takes no other shard
        [(1, 0, 1)],
    ]
    # a shard that does not fit the current job's room starts its own job, uncut
    assert cut_for_prefill([[10], [10, 10]], cap=25) == [[(0, 0, 1)], [(1, 0, 2)]]
    # one series over the cap is never cut; no cap: one job
    assert cut_for_prefill([[50]], cap=20) == [[(0, 0, 1)]]
    assert cut_for_prefill([[10] * 5, [10]], cap=0) == [[(0, 0, 5), (1, 0, 1)]]


def _live(s: Scheduler, *tickets: BatchTicket) -> None:
    """Admit and prefill each ticket (one step each), leaving them live and able to share."""
    for t in tickets:
        s.submit(t)
    for _ in tickets:
        decided = s.next_step()
        assert decided.run is not None
        s.stepped_together(
            {decided.run: s.live[decided.run].steps_left - 1}, {decided.run: True}
        )


def test_next_step_names_every_job_and_the_rows_of_a_shared_step():
    s = Scheduler(budget_bytes=1000, max_skipped=100, max_step_rows=20)
    _live(
        s,
        BatchTicket(1, rows=10, steps=24, requests=frozenset({"big"})),
        BatchTicket(2, rows=10, steps=24, requests=frozenset({"big"})),
        BatchTicket(3, rows=5, steps=24, requests=frozenset({"small"})),
    )
    decided = s.next_step()
    # the small job runs (least work), the first part of the big request joins; the second would
    # take the step past 20 rows
    assert decided.run == 3
    assert decided.step == (3, 1) and decided.step_rows == 15


def test_a_requests_jobs_stay_apart_unless_the_policy_lets_them_share():
    def step(within: bool) -> tuple[int, ...]:
        s = Scheduler(budget_bytes=1000, max_skipped=100, max_step_rows=30,
                      share_within_request=within)
        _live(
            s,
            BatchTicket(1, rows=10, steps=24, requests=frozenset({"big"})),
            BatchTicket(2, rows=10, steps=24, requests=frozenset({"big"})),
        )
        return s.next_step().step

    assert step(within=False) == (1,)
    assert step(within=True) == (1, 2)


def test_a_job_that_cannot_share_its_next_step_steps_alone_and_no_cap_means_no_sharing():
    s = Scheduler(budget_bytes=1000, max_skipped=100, max_step_rows=100)
    _live(s, BatchTicket(1, rows=4, steps=24), BatchTicket(2, rows=4, steps=24))
    s.stepped_together({1: s.live[1].steps_left - 1}, {1: False})  # e.g. its window recomputes
    decided = s.next_step()
    assert decided.run == 1 and decided.step == (1,)  # job 2 could join, but job 1 steps alone
    s.stepped_together({1: s.live[1].steps_left - 1}, {1: True})
    assert s.next_step().step == (1, 2)
    s = Scheduler(budget_bytes=1000, max_skipped=100, max_step_rows=0)
    _live(s, BatchTicket(1, rows=4, steps=24), BatchTicket(2, rows=4, steps=24))
    assert len(s.next_step().step) == 1


def test_a_fresh_job_steps_alone_and_the_step_is_empty_when_nothing_runs():
    s = Scheduler(budget_bytes=1000, max_step_rows=100)
    assert s.next_step().step == ()
    s.submit(BatchTicket(1, rows=4, steps=3))
    first = s.next_step()
    assert first.admit == (1,) and first.step == (1,) and first.step_rows == 4


def test_joining_keeps_the_priority_order_and_skips_what_does_not_fit():
    assert joining(5, [10, 20, 10, 3], max_step_rows=32) == [0, 2, 3]
    big, small = frozenset({"big"}), frozenset({"small"})
    assert joining(5, [10, 10, 3], 32, False, small, [big, big, frozenset({"x"})]) == [0, 2]


def _shard(ref: str, series: int, arrived: float = 0.0, key: str = "a") -> Arrival:
    """A waiting shard of ``series`` series of 10 history rows, 2 paths, 3 steps."""
    return Arrival(key, tokens=series * 13 * 2, arrived=arrived, ref=ref, costs=(20,) * series,
                   lengths=(10,) * series, paths=2, steps=3, request=ref)


def test_the_next_step_forms_the_jobs_of_arrived_shards_and_names_every_row_it_runs():
    s = Scheduler(10**6, wait_s=0.005, max_prefill_tokens=60,
                  job_memory=lambda key, lengths: (len(lengths), 0))
    s.arrive(_shard("big", 5, arrived=1.0))
    s.arrive(_shard("small", 1, arrived=1.001))
    assert s.wakeup(now=1.002) == pytest.approx(0.003) and s.next_step(now=1.002).formed == ()
    assert s.waiting_shards == 2
    step = s.next_step(now=1.005)
    # the big shard cut at 60 prefill tokens (3 series); its last job takes no other
    assert [p.segments for p in step.formed] == [
        (("big", 0, 3),), (("big", 3, 5),), (("small", 0, 1),),
    ]
    tickets = {p.job_id: s.live.get(p.job_id) or s.queued[p.job_id] for p in step.formed}
    assert [(t.rows, t.steps, t.shard_rows, t.resident_bytes) for t in tickets.values()] == [
        (6, 3, 10, 3), (4, 3, 10, 2), (2, 3, 2, 1),
    ]
    assert [t.requests for t in tickets.values()] == [{"big"}, {"big"}, {"small"}]
    # the step names its jobs and each job's rows
    assert step.run is not None and step.step_segments[0] == s.plans[step.run].segments
    assert not s.inbox and step.formed and s.next_step(now=2.0).formed == ()


def test_a_cancelled_waiting_shard_forms_no_job():
    s = Scheduler(10**6)
    s.arrive(_shard("gone", 2))
    s.arrive(_shard("kept", 1))
    s.cancel_shard("gone")
    assert [p.segments for p in s.next_step(now=0.0).formed] == [(("kept", 0, 1),)]


def test_a_job_out_of_memory_is_halved_into_two_jobs_down_to_min_split():
    s = Scheduler(10**6, min_split=1)
    s.arrive(_shard("x", 3))
    s.arrive(_shard("y", 2))
    (job,) = s.next_step(now=0.0).formed
    assert s.failed(job.job_id, out_of_memory=True)
    halves = s.next_step(now=0.0).formed
    assert [p.segments for p in halves] == [(("x", 0, 2),), (("x", 2, 3), ("y", 0, 2))]
    assert job.job_id not in s.plans and all(p.job_id in s.plans for p in halves)
    # another error fails the job's shards (the runner's part); one series is not halved
    assert not s.failed(halves[1].job_id, out_of_memory=False)
    one = Scheduler(10**6, min_split=1)
    one.arrive(_shard("z", 1))
    (single,) = one.next_step(now=0.0).formed
    assert not one.failed(single.job_id, out_of_memory=True) and one.idle
