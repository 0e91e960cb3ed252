"""``kronos bench mixed``'s arithmetic without a service: the same-work baseline of the mixed load
and the bracketed ratio of the big request's runs."""

import pytest

from loadtests.bench_mixed import (
    MIXED_SHAPES,
    QUICK,
    Sizes,
    bracketed_ratio,
    busy_cpu_s,
    cpu_per_small,
    mixed_shapes,
    same_work_ratio,
)


def test_same_work_ratio_weighs_each_shape_by_its_own_single_batch_rate():
    engine = {"shape_row_steps_per_s": [1000.0, 100.0]}
    # 2,000 row-steps of a fast shape (2 s of engine time) and 300 of a slow one (3 s): 5 s of
    # engine work, answered by the service in 10 s: half the engine's speed
    assert same_work_ratio(
        {"shape_row_steps": [2000, 300], "seconds": 10.0}, engine
    ) == pytest.approx(0.5)
    # one rate for all (1000/s) would have called the same run 0.23
    assert same_work_ratio({"shape_row_steps": [0, 0], "seconds": 10.0}, engine) == 0.0


def test_quick_sizes_scale_the_mixed_shapes_down_and_full_sizes_keep_them():
    assert mixed_shapes(Sizes()) == MIXED_SHAPES
    quick = mixed_shapes(QUICK)
    assert len(quick) == len(MIXED_SHAPES)
    assert all(
        q[0] <= m[0] and q[1] <= m[1] and q[2] <= m[2] and q[3] == m[3]
        for q, m in zip(quick, MIXED_SHAPES)
    )


def test_bracketed_ratio_compares_each_run_with_the_alone_runs_around_it():
    # the machine slows down 2x over the rounds; each run is 10% above the alone runs around it
    alone = [5.0, 7.5, 10.0]
    assert bracketed_ratio([6.875, 9.625], alone) == pytest.approx(1.1)
    # the drift a best-of would count
    assert bracketed_ratio([6.875, 9.625], alone) < 9.625 / min(alone)
    with pytest.raises(ValueError, match="need 3 alone runs"):
        bracketed_ratio([1.0, 1.0], [1.0, 1.0])


def test_cpu_per_small_is_the_runs_cpu_beyond_the_alone_runs_over_its_small_requests():
    # alone runs around round 1 used 20 and 24 CPU s (the big request's work: 22); with small ones
    # 26.4: 4.4 CPU s over 20 small ones; round 2: 23.1 against 22, 1.1 over 11
    alone = [20.0, 24.0, 20.0]
    with_small = [26.4, 23.1]
    assert cpu_per_small(alone, with_small, [20, 11]) == pytest.approx((0.22 + 0.1) / 2)
    assert cpu_per_small(alone, [None], [20]) is None  # no /proc/stat
    assert cpu_per_small(alone, [26.4], [0]) is None


def test_busy_cpu_grows_while_this_process_works():
    before = busy_cpu_s()
    if before is None:
        pytest.skip("no /proc/stat on this system")
    x = 0
    for i in range(3_000_000):  # ~0.1-0.3 s of CPU
        x += i * i
    assert busy_cpu_s() > before and x > 0


@pytest.mark.parametrize(("met", "quick", "rc"), [
    (True, False, 0), (False, False, 1), (False, True, 0), (None, False, 0)])
def test_a_missed_goal_makes_the_run_exit_1_except_the_quick_smoke(
    monkeypatch, capsys, met, quick, rc
):
    """The run's own verdict: a goal missed on a full run is an exit status of 1 and a line naming
    it. The measuring parts are replaced here (they need the service and minutes of CPU; the
    integration smoke test runs them for real); ``met`` None is a goal not measured."""
    import argparse

    import loadtests.bench_mixed as bm

    goals = {"big_with_small_over_alone": {"goal": "<= 1.1", "met": met}}
    monkeypatch.setattr(bm, "_engine_throughput", lambda *a: {})
    monkeypatch.setattr(bm, "measure", lambda *a, **k: {"goals": goals})
    monkeypatch.setattr(bm, "table", lambda fig: "| table |")
    args = argparse.Namespace(
        host="http://127.0.0.1:1", quick=quick, mixed_seconds=1.0, json=None, replicas=1
    )
    assert bm.run(args) == rc
    assert ("goals missed: big_with_small_over_alone" in capsys.readouterr().err) == (rc == 1)
