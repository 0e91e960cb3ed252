"""The cache steps alone, without a model: which rows are cached, evicted or recomputed."""

from __future__ import annotations

import pytest

from kronos_core.engine.cache_steps import cache_step, cache_steps


def test_exact_mode_keeps_rows_cached_until_their_window_slides():
    # max_context 10: row 0 (3 tokens) fits through step 7; row 1 (9) slides at step 2; row 2 (12)
    # at step 1
    steps = cache_steps([3, 9, 12], horizon=10, max_context=10, mode="exact")
    first = steps[0]
    assert (
        first.prefill and first.cached == (0, 1, 2) and first.recompute == () and first.evict == ()
    )
    assert (steps[1].cached, steps[1].evict, steps[1].recompute) == ((0, 1), (2,), (2,))
    assert (steps[2].cached, steps[2].evict, steps[2].recompute) == ((0,), (1,), (1, 2))
    assert all(p.cached == (0,) and p.evict == () for p in steps[3:8])
    assert (steps[8].cached, steps[8].evict, steps[8].recompute) == ((), (0,), (0, 1, 2))
    assert steps[9].evict == () and steps[9].recompute == (0, 1, 2)
    assert not any(p.prefill for p in steps[1:]) and not any(p.trim_window for p in steps)


@pytest.mark.parametrize("mode", ["exact", "rolling", "recompute"])
@pytest.mark.parametrize("lengths", [[1], [5, 40, 17], [64, 64], [100, 2, 63, 64, 65]])
def test_every_row_runs_once_per_step_and_is_evicted_at_most_once(mode, lengths):
    steps = cache_steps(lengths, horizon=30, max_context=64, mode=mode)
    evicted: list[int] = []
    for step, this_step in enumerate(steps):
        assert this_step.step == step
        assert this_step.rows == tuple(range(len(lengths)))  # each row produces exactly one token
        assert not set(this_step.cached) & set(this_step.recompute)
        evicted += this_step.evict
        if step > 0:  # a row leaves the caches once, and only from the caches it was in
            assert set(this_step.evict) <= set(steps[step - 1].cached)
            assert set(steps[step - 1].cached) - set(this_step.evict) == set(this_step.cached)
    assert len(evicted) == len(set(evicted))


def test_rows_recomputed_exactly_when_their_tokens_exceed_the_context():
    lengths, mc = [5, 40, 17, 64, 70], 64
    for step in range(1, 40):
        this_step = cache_step(lengths, step, mc, "exact")
        assert this_step.recompute == tuple(i for i, n in enumerate(lengths) if n + step > mc)


def test_rolling_never_recomputes_and_recompute_never_caches():
    rolling = cache_steps([10, 200], 50, 64, "rolling")
    assert all(
        p.cached == (0, 1) and p.recompute == () and p.evict == () and p.trim_window
        for p in rolling
    )
    assert rolling[0].prefill and not rolling[1].prefill
    recompute = cache_steps([10, 200], 5, 64, "recompute")
    assert all(p.cached == () and p.recompute == (0, 1) and not p.prefill for p in recompute)


def test_cache_steps_refuse_bad_arguments():
    with pytest.raises(ValueError, match="sliding"):
        cache_step([5], 0, 10, "fast")
    with pytest.raises(ValueError, match="max_context"):
        cache_step([5], 0, 0)
    with pytest.raises(ValueError, match="history token"):
        cache_step([5, 0], 0, 10)
    with pytest.raises(ValueError, match="step"):
        cache_step([5], -1, 10)
    with pytest.raises(ValueError, match="horizon"):
        cache_steps([5], 0, 10)
