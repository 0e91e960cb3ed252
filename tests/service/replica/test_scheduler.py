"""The replica's step scheduler (``service.replica.scheduler``), driven step by step without a
model: small work first, preemption at step boundaries, aging, the memory budget, cancellation."""

import pytest

from service.replica.scheduler import BatchTicket, Scheduler


def drive(s: Scheduler, steps: int) -> list[int]:
    """Carry out ``steps`` next steps as the replica would: every admitted job is live, the
    picked one steps."""
    ran = []
    for _ in range(steps):
        decided = s.next_step()
        if decided.run is None:
            break
        ran.append(decided.run)
        s.stepped(decided.run, s.live[decided.run].steps_left - 1)
    return ran


def test_a_lone_job_is_admitted_and_runs_every_step_to_the_end():
    s = Scheduler(budget_bytes=100)
    s.submit(BatchTicket(1, rows=10, steps=3, resident_bytes=10))
    first = s.next_step()
    assert first.admit == (1,) and first.run == 1 and first.admitted_mid_batch == 0
    s.stepped(1, 2)
    assert drive(s, 10) == [1, 1] and s.idle


def test_small_job_admitted_while_a_big_job_runs_goes_first_then_the_big_job_resumes():
    s = Scheduler(budget_bytes=1000, max_skipped=30)
    s.submit(BatchTicket(1, rows=1000, steps=24, resident_bytes=100))
    assert drive(s, 5) == [1] * 5
    s.submit(BatchTicket(2, rows=5, steps=24, resident_bytes=1))
    decided = s.next_step()
    assert decided.admit == (2,) and decided.run == 2 and decided.admitted_mid_batch == 1
    s.stepped(2, 23)
    order = drive(s, 100)
    assert order[:23] == [2] * 23  # the small job finishes within its own 24 steps
    assert order[23:] == [1] * 19  # the big one resumes where it stopped: 24 - 5 steps left
    assert s.idle


def test_equal_jobs_run_in_arrival_order_and_the_plan_is_deterministic():
    def run_once():
        s = Scheduler(budget_bytes=1000, max_skipped=100)
        for j in (3, 1, 2):
            s.submit(BatchTicket(j, rows=4, steps=2))
        return drive(s, 20)

    first = run_once()
    # the first to arrive prefills, the next is prefilled ahead (two decoding), then least work
    # first; ties by arrival
    assert first == [3, 1, 3, 2, 1, 2]
    assert first == run_once()


def test_equal_work_goes_to_the_job_of_the_smaller_shard_not_the_first_to_arrive():
    # a big shard cut into jobs as small as a small request's: the small one does not wait for them
    s = Scheduler(budget_bytes=1000, max_skipped=100)
    for j in range(1, 5):
        s.submit(BatchTicket(j, rows=5, steps=24, shard_rows=500))
    s.submit(BatchTicket(9, rows=5, steps=24, shard_rows=5))
    order = drive(s, 200)
    assert order[:24] == [9] * 24
    # then by arrival, each part prefilled while the one before it decodes (its first step)
    assert order[24:] == [1, 2] + [1] * 23 + [3] + [2] * 23 + [4] + [3] * 23 + [4] * 23
    # unset (0) keeps arrival order among equals
    s = Scheduler(budget_bytes=1000, max_skipped=100)
    for j in (3, 1):
        s.submit(BatchTicket(j, rows=4, steps=2))
    assert drive(s, 10) == [3, 1, 3, 1]


def test_no_starvation_a_big_job_gets_a_step_in_every_max_skipped_plus_one():
    s = Scheduler(budget_bytes=10**6, max_skipped=3)
    s.submit(BatchTicket(1, rows=1000, steps=10))
    ran = []
    for k in range(40):  # a new small job at every step: the small ones alone would fill the device
        s.submit(BatchTicket(100 + k, rows=1, steps=1))
        decided = s.next_step()
        ran.append(decided.run)
        s.stepped(decided.run, s.live[decided.run].steps_left - 1)
    gaps, last = [], None
    for i, j in enumerate(ran):
        if j == 1:
            if last is not None:
                gaps.append(i - last)
            last = i
    # the big job finished, one step in every 4 at worst
    assert ran.count(1) == 10 and max(gaps) <= 4


def test_admission_respects_the_budget_and_a_job_that_does_not_fit_waits():
    s = Scheduler(budget_bytes=100)
    s.submit(BatchTicket(1, rows=100, steps=5, resident_bytes=60, transient_bytes=20))
    assert s.next_step().admit == (1,)
    s.stepped(1, 4)
    # 60 + 30 + 20 > 100
    s.submit(BatchTicket(2, rows=10, steps=5, resident_bytes=30, transient_bytes=10))
    # 60 + 15 + 20 fits
    s.submit(BatchTicket(3, rows=10, steps=5, resident_bytes=15, transient_bytes=5))
    decided = s.next_step()
    assert decided.admit == (3,) and 2 in s.queued
    assert s.memory_in_use() <= 100
    while not s.idle:
        decided = s.next_step()
        assert s.memory_in_use() <= 100 or list(s.live) == [2]
        if decided.run is not None:
            s.stepped(decided.run, s.live[decided.run].steps_left - 1)
    assert 2 not in s.queued  # admitted once the device had room


def test_a_job_above_the_budget_still_runs_on_an_empty_device():
    s = Scheduler(budget_bytes=10)
    s.submit(BatchTicket(1, rows=5, steps=2, resident_bytes=50))
    assert s.next_step().admit == (1,)


def test_a_queued_job_that_waited_too_long_is_admitted_before_new_small_ones():
    s = Scheduler(budget_bytes=100, max_skipped=2)
    s.submit(BatchTicket(1, rows=1, steps=3, resident_bytes=60))
    s.next_step()
    s.submit(BatchTicket(2, rows=50, steps=3, resident_bytes=60))  # does not fit beside job 1
    admitted_at = None
    for k in range(30):  # small jobs keep arriving, each would fit beside job 1
        s.submit(BatchTicket(10 + k, rows=1, steps=1, resident_bytes=1))
        decided = s.next_step()
        if 2 in decided.admit:
            admitted_at = k
            break
        if decided.run is not None:
            s.stepped(decided.run, s.live[decided.run].steps_left - 1)
    assert admitted_at is not None and admitted_at < 10


def test_cancelled_jobs_leave_at_the_next_plan_live_or_queued():
    s = Scheduler(budget_bytes=100)
    s.submit(BatchTicket(1, rows=10, steps=5, resident_bytes=50))
    s.submit(BatchTicket(2, rows=10, steps=5, resident_bytes=60))
    s.next_step()
    s.stepped(1, 4)
    assert 2 in s.queued
    s.cancel(1)
    s.cancel(2)
    decided = s.next_step()
    assert set(decided.leave) == {1, 2} and decided.run is None and s.idle


def test_cancelling_the_big_job_frees_room_for_a_waiting_one_in_the_same_plan():
    s = Scheduler(budget_bytes=100)
    s.submit(BatchTicket(1, rows=100, steps=5, resident_bytes=80))
    s.next_step()
    s.submit(BatchTicket(2, rows=200, steps=5, resident_bytes=80))
    assert s.next_step().admit == ()
    s.cancel(1)
    decided = s.next_step()
    assert decided.leave == (1,) and decided.admit == (2,) and decided.run == 2


def test_discard_forgets_a_job_and_duplicates_are_refused():
    s = Scheduler(budget_bytes=100)
    s.submit(BatchTicket(1, rows=1, steps=1))
    with pytest.raises(ValueError):
        s.submit(BatchTicket(1, rows=1, steps=1))
    s.discard(1)
    assert s.idle and s.next_step().run is None


def test_parts_of_one_big_request_do_not_age_together_ahead_of_a_later_small_job():
    # a big request cut into four jobs; a small job that comes later and runs longer than
    # max_skipped is interrupted by one step of the oldest job per max_skipped steps, never by the
    # other parts
    s = Scheduler(budget_bytes=10**6, max_skipped=3)
    for j in (1, 2, 3, 4):
        s.submit(BatchTicket(j, rows=100, steps=10))
    s.submit(BatchTicket(5, rows=10, steps=2))  # the remainder of the cut: least work, runs first
    # 5 and the first part prefill (two decoding), 5 ends, the second part is prefilled ahead
    assert drive(s, 4) == [5, 1, 5, 2]
    assert [s.live[j].skipped for j in (1, 2, 3, 4)] == [2, 0, 0, 0]  # only the oldest aged
    s.submit(BatchTicket(9, rows=1, steps=8))
    # the oldest part (skipped twice already) takes one step in every max_skipped + 1; the others
    # never do
    assert drive(s, 11) == [9, 1, 9, 9, 9, 1, 9, 9, 9, 1, 9]
    assert 9 not in s.live and drive(s, 100)[:6] == [1] * 6  # then the oldest runs to its end


def test_a_smaller_request_starts_at_once_instead_of_waiting_for_a_part_with_less_work():
    # a big request's part decodes with 2 steps left (less work than the small job's 5 x 24); the
    # small job, cut from a smaller shard, prefills next, so it then decodes beside the part
    s = Scheduler(budget_bytes=10**6, max_skipped=100)
    s.submit(BatchTicket(1, rows=10, steps=24, shard_rows=62))
    s.submit(BatchTicket(2, rows=10, steps=24, shard_rows=62))
    drive(s, 23)  # both prefilled; part 1 has 2 steps left
    assert s.live[1].steps_left == 2 and s.live[1].work < 5 * 24
    s.submit(BatchTicket(9, rows=5, steps=24, shard_rows=5))
    assert s.next_step().run == 9  # its prefill, not part 1's last steps
    s.stepped(9, 23)
    assert s.next_step().run == 1  # then least work first again (9 shares part 1's steps)


def test_the_next_part_is_prefilled_ahead_unless_a_smaller_request_is_live():
    s = Scheduler(budget_bytes=10**6, max_skipped=100)
    for j in (1, 2, 3):
        s.submit(BatchTicket(j, rows=10, steps=24, shard_rows=62))
    # part 1 prefills, part 2 ahead of its turn (two decoding), part 3 waits for its turn
    assert drive(s, 4) == [1, 2, 1, 1]
    # a small request decoding alone when a big one arrives: no part is prefilled ahead of the
    # small job's remaining steps (that prefill would hold them up)
    s = Scheduler(budget_bytes=10**6, max_skipped=100)
    s.submit(BatchTicket(8, rows=5, steps=24, shard_rows=5))
    assert drive(s, 1) == [8]
    for j in (1, 2):
        s.submit(BatchTicket(j, rows=10, steps=24, shard_rows=62))
    assert drive(s, 25) == [8] * 23 + [1, 2]
