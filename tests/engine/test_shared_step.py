"""Shared decode steps (continuous batching, ``kronos_core.engine.shared_step``): jobs whose rows
share one decode step give exactly what each gives alone, whatever their options, lengths, sample
counts and sliding windows; jobs that cannot share are refused before any job moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from series_helpers import windows

from kronos_core import KronosPredictor
from kronos_core.base.options import ForecastOptions

SEEDED = ForecastOptions(10, sample_count=3, top_p=0.9, seed=1234, quantiles=(0.1, 0.5, 0.9))


def _drive(jobs) -> int:
    """Step ``jobs`` until all are done: every job whose next step can be shared in one shared
    step, the others alone -> how many steps held two jobs or more."""
    shared = 0
    while not all(job.done for job in jobs):
        live = [job for job in jobs if not job.done]
        ready = [job for job in live if job.shares_steps]
        if ready:
            KronosPredictor.step_together(ready)
            shared += len(ready) > 1
        for job in live:
            if job not in ready and not job.done:
                job.step()
    return shared


@pytest.mark.parametrize("sliding", ["exact", "rolling"])
def test_jobs_sharing_decode_steps_give_what_each_gives_alone(tiny, goog, sliding):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80, sliding=sliding)
    a = windows(goog, [0, 400, 800], [64, 40, 75], 10)  # 75 + 10 > 80: a window slides mid-way
    b = windows(goog, [1200, 1600], [30, 50], 6)
    c = windows(goog, [1800], [79], 12)  # slides from its second step
    calls = [
        (a, SEEDED),
        (b, SEEDED.with_(horizon=6, sample_count=2, temperature=0.7, seed=9)),
        (c, ForecastOptions(12, top_k=1, top_p=1.0)),  # greedy
    ]
    alone = [predictor.forecast(*inputs, options) for inputs, options in calls]
    jobs = [predictor.start_forecast(*inputs, options) for inputs, options in calls]
    jobs[0].step()
    jobs[0].step()  # a is two steps ahead; b and c start together
    assert _drive(jobs) >= 5
    for job, lone in zip(jobs, alone):
        got = job.result()
        np.testing.assert_array_equal(got.paths, lone.paths)
        np.testing.assert_array_equal(got.mean, lone.mean)
        np.testing.assert_array_equal(got.quantiles, lone.quantiles)


def test_jobs_with_the_same_options_draw_their_tokens_together_and_as_alone(
    tiny, goog, monkeypatch
):
    """Jobs with equal sampling options and seeds of their own draw in one batch (one s1 and one
    s2 head product for all their rows, ``kronos_core.engine.job._sample_together``), each at its
    own step with its own draws and its own s2-head keys; every job still gets exactly its lone
    paths. Greedy jobs draw together too."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80)
    calls = [
        (windows(goog, [0, 400, 800], [64, 40, 75], 10), SEEDED),  # slides: a recompute group
        (windows(goog, [1200, 1600], [30, 50], 8), SEEDED.with_(horizon=8, seed=9)),
        (windows(goog, [2000], [20], 6), SEEDED.with_(horizon=6, seed=5, sample_count=1)),
        (windows(goog, [300], [33], 7), ForecastOptions(7, top_k=1, top_p=1.0)),  # greedy
        (windows(goog, [900, 100], [50, 44], 5), ForecastOptions(5, top_k=1, top_p=1.0)),
    ]
    alone = [predictor.forecast(*inputs, options) for inputs, options in calls]
    groups_drawn: list[int] = []
    model = predictor.model
    together = model.s2_logits_of_groups

    def counted(hidden_last, s1, groups):
        groups_drawn.append(len(groups))
        return together(hidden_last, s1, groups)

    monkeypatch.setattr(model, "s2_logits_of_groups", counted)
    jobs = [predictor.start_forecast(*inputs, options) for inputs, options in calls]
    jobs[1].step()
    jobs[1].step()  # the second job is two steps ahead: its draws are of another step
    assert _drive(jobs) >= 5
    assert groups_drawn and max(groups_drawn) >= 2
    for job, lone in zip(jobs, alone):
        got = job.result()
        np.testing.assert_array_equal(got.paths, lone.paths)
        np.testing.assert_array_equal(got.quantiles, lone.quantiles)


def test_a_job_shares_steps_only_between_its_prefill_and_its_end(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80)
    job = predictor.start_forecast(*windows(goog, [0], [40], 3), SEEDED.with_(horizon=3))
    assert not job.shares_steps  # its first step tokenizes and prefills
    job.step()
    assert job.shares_steps
    job.step()
    job.step()
    assert job.done and not job.shares_steps


def test_a_compiled_decode_step_runs_alone(tiny, goog):
    """A job whose config compiles its decode step does not share (the shared step is eager)."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80, compile=True)
    job = predictor.start_forecast(*windows(goog, [0], [40], 3), SEEDED.with_(horizon=3))
    job.step()
    assert not job.shares_steps


def test_jobs_that_cannot_share_are_refused_before_any_moves(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80)
    started = predictor.start_forecast(*windows(goog, [0], [40], 4), SEEDED.with_(horizon=4))
    started.step()
    fresh = predictor.start_forecast(*windows(goog, [300], [40], 4), SEEDED.with_(horizon=4))
    with pytest.raises(ValueError, match="not a plain cached decode"):
        KronosPredictor.step_together([started, fresh])
    assert started.steps_left == 3 and fresh.steps_left == 4
    with pytest.raises(ValueError, match="twice"):
        KronosPredictor.step_together([started, started])
    other = KronosPredictor(*tiny, device="cpu", max_context=80, dtype=torch.bfloat16)
    bf16 = other.start_forecast(*windows(goog, [600], [40], 4), SEEDED.with_(horizon=4))
    bf16.step()
    with pytest.raises(ValueError, match="dtype"):
        KronosPredictor.step_together([started, bf16])
    assert started.steps_left == 3 and bf16.steps_left == 3
