"""The step planner alone, without a model: which rows are cached, evicted or recomputed."""

from __future__ import annotations

import pytest

from kronos_core.engine.plan import plan_schedule, plan_step


def test_exact_mode_keeps_rows_cached_until_their_window_slides():
    # max_context 10: row 0 (3 tokens) fits through step 7; row 1 (9) slides at step 2; row 2 (12)
    # at step 1
    plans = plan_schedule([3, 9, 12], horizon=10, max_context=10, mode="exact")
    first = plans[0]
    assert (
        first.prefill and first.cached == (0, 1, 2) and first.recompute == () and first.evict == ()
    )
    assert (plans[1].cached, plans[1].evict, plans[1].recompute) == ((0, 1), (2,), (2,))
    assert (plans[2].cached, plans[2].evict, plans[2].recompute) == ((0,), (1,), (1, 2))
    assert all(p.cached == (0,) and p.evict == () for p in plans[3:8])
    assert (plans[8].cached, plans[8].evict, plans[8].recompute) == ((), (0,), (0, 1, 2))
    assert plans[9].evict == () and plans[9].recompute == (0, 1, 2)
    assert not any(p.prefill for p in plans[1:]) and not any(p.trim_window for p in plans)


@pytest.mark.parametrize("mode", ["exact", "rolling", "recompute"])
@pytest.mark.parametrize("lengths", [[1], [5, 40, 17], [64, 64], [100, 2, 63, 64, 65]])
def test_every_row_runs_once_per_step_and_is_evicted_at_most_once(mode, lengths):
    plans = plan_schedule(lengths, horizon=30, max_context=64, mode=mode)
    evicted: list[int] = []
    for step, plan in enumerate(plans):
        assert plan.step == step
        assert plan.rows == tuple(range(len(lengths)))  # each row produces exactly one token
        assert not set(plan.cached) & set(plan.recompute)
        evicted += plan.evict
        if step > 0:  # a row leaves the caches once, and only from the caches it was in
            assert set(plan.evict) <= set(plans[step - 1].cached)
            assert set(plans[step - 1].cached) - set(plan.evict) == set(plan.cached)
    assert len(evicted) == len(set(evicted))


def test_rows_recomputed_exactly_when_their_tokens_exceed_the_context():
    lengths, mc = [5, 40, 17, 64, 70], 64
    for step in range(1, 40):
        plan = plan_step(lengths, step, mc, "exact")
        assert plan.recompute == tuple(i for i, n in enumerate(lengths) if n + step > mc)


def test_rolling_never_recomputes_and_recompute_never_caches():
    rolling = plan_schedule([10, 200], 50, 64, "rolling")
    assert all(
        p.cached == (0, 1) and p.recompute == () and p.evict == () and p.trim_window
        for p in rolling
    )
    assert rolling[0].prefill and not rolling[1].prefill
    recompute = plan_schedule([10, 200], 5, 64, "recompute")
    assert all(p.cached == () and p.recompute == (0, 1) and not p.prefill for p in recompute)


def test_planner_refuses_bad_arguments():
    with pytest.raises(ValueError, match="sliding"):
        plan_step([5], 0, 10, "fast")
    with pytest.raises(ValueError, match="max_context"):
        plan_step([5], 0, 0)
    with pytest.raises(ValueError, match="history token"):
        plan_step([5, 0], 0, 10)
    with pytest.raises(ValueError, match="step"):
        plan_step([5], -1, 10)
    with pytest.raises(ValueError, match="horizon"):
        plan_schedule([5], 0, 10)
