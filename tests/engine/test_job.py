"""Generation / ForecastJob: stepped, interleaved with other jobs, closed mid-way."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
from series_helpers import windows

from kronos_core import KronosPredictor
from kronos_core.base.options import ForecastOptions
from kronos_core.engine import Generation, GenerationConfig, Generator, SamplingParams, assemble
from kronos_core.engine.sampling import row_keys


def _interleave(*jobs) -> None:
    """Step A, step B, step A, ... until every job is done."""
    while not all(job.done for job in jobs):
        for job in jobs:
            if not job.done:
                job.step()


SEEDED = ForecastOptions(12, sample_count=3, top_p=0.9, seed=1234, quantiles=(0.1, 0.5, 0.9))
GREEDY = ForecastOptions(12, top_k=1, top_p=1.0)


@pytest.mark.parametrize("options", [SEEDED, GREEDY], ids=["seeded", "greedy"])
@pytest.mark.parametrize("sliding", ["exact", "rolling"])
def test_interleaved_jobs_give_what_each_gives_alone(tiny, goog, options, sliding):
    """Two forecasts stepped in turn on one predictor: each equals its forecast() alone, exactly."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=80, sliding=sliding)
    a = windows(goog, [0, 400, 800], [64, 40, 75], 12)  # 75 + 12 > 80: a window slides mid-way
    b = windows(goog, [1200, 1600], [30, 50], 12)
    b_options = options.with_(horizon=12, sample_count=2) if options.seed is not None else options
    alone_a = predictor.forecast(*a, options)
    alone_b = predictor.forecast(*b, b_options)
    job_a, job_b = predictor.start_forecast(*a, options), predictor.start_forecast(*b, b_options)
    assert job_a.rows == 3 * options.sample_count and job_a.steps_left == 12 and not job_a.done
    job_a.step()  # A starts first, B joins one step later
    _interleave(job_b, job_a)
    together_a, together_b = job_a.result(), job_b.result()
    for together, alone in ((together_a, alone_a), (together_b, alone_b)):
        np.testing.assert_array_equal(together.paths, alone.paths)
        np.testing.assert_array_equal(together.mean, alone.mean)
        np.testing.assert_array_equal(together.quantiles, alone.quantiles)
    assert job_a.steps_left == 0 and job_a.done


def test_generate_is_a_job_run_to_the_end(tiny, goog):
    """Generator.generate and a Generation stepped by hand give the same tokens and candles."""
    from kronos_core.base.candles import normalize, time_features

    gen = Generator(*tiny)
    values, xs, ys = windows(goog, [0, 300], [64, 40], 8)
    batch = assemble(
        [normalize(v)[0] for v in values], [time_features(x) for x in xs],
        [time_features(y) for y in ys], sample_count=2, row_keys=row_keys(5, [1, 2], 2),
    )
    cfg = GenerationConfig(8, 128, SamplingParams(top_p=0.9))
    whole = gen.generate(batch, cfg)
    job = Generation(gen, batch, cfg)
    steps = 0
    while not job.done:
        job.step()
        steps += 1
    out = job.result()
    assert steps == 8 and job.rows == 4
    assert (
        torch.equal(out.s1, whole.s1)
        and torch.equal(out.s2, whole.s2)
        and torch.equal(out.candles, whole.candles)
    )
    assert out.stats.tokens_generated == whole.stats.tokens_generated == 32
    with pytest.raises(RuntimeError, match="done"):
        job.step()


def test_close_mid_way_frees_the_caches(tiny, goog):
    """close() after a few steps drops every cache tensor; the job refuses further steps and
    results."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    job = predictor.start_forecast(
        *windows(goog, [0, 500], [64, 40], 10), ForecastOptions(10, seed=3)
    )
    with pytest.raises(RuntimeError, match="not done"):
        job.result()
    assert job.generation.cache_tensors() == []  # nothing before the prefill
    for _ in range(3):
        job.step()
    held = job.generation.cache_tensors()
    assert held and job.steps_left == 7
    refs = [weakref.ref(t) for t in held]
    del held
    job.close()
    gc.collect()
    assert job.generation.cache_tensors() == []
    # the cache tensors themselves are gone, not just unreferenced here
    assert all(r() is None for r in refs)
    assert job.generation.closed and not job.done
    with pytest.raises(RuntimeError, match="closed"):
        job.step()
    with pytest.raises(RuntimeError, match="not done"):
        job.result()


def test_a_finished_job_holds_no_caches(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    job = predictor.start_forecast(*windows(goog, [0], [64], 4), ForecastOptions(4, top_k=1))
    while not job.done:
        job.step()
    assert job.generation.cache_tensors() == [] and job.result().paths.shape == (1, 1, 4, 6)


@pytest.mark.parametrize("sliding", ["exact", "rolling"])
def test_a_series_paths_share_one_tokenize_and_prefill_with_the_same_result(tiny, goog, sliding):
    """``EngineBatch.paths``: each series is tokenized and prefilled once and spread over its
    paths; the tokens equal those of the rows run one by one (``paths=1``), ragged and with a
    window that slides mid-way included, and so do the candles but for float rounding: the
    token-to-candle decoder runs over a series' shared history once and then over each path's
    horizon (``KronosTokenizer.decode_after_shared_history``), products of other shapes than
    one pass over each row's whole window."""
    from dataclasses import replace

    from kronos_core.base.candles import normalize, time_features

    gen = Generator(*tiny)
    values, xs, ys = windows(goog, [0, 300, 900], [64, 40, 75], 12)
    batch = assemble(
        [normalize(v)[0] for v in values], [time_features(x) for x in xs],
        [time_features(y) for y in ys], sample_count=4, row_keys=row_keys(5, [1, 2, 3], 4),
    )
    assert batch.paths == 4 and batch.rows == 12
    cfg = GenerationConfig(12, 80, SamplingParams(top_p=0.9), sliding=sliding)
    shared = gen.generate(batch, cfg)
    apart = gen.generate(replace(batch, paths=1), cfg)
    assert torch.equal(shared.s1, apart.s1) and torch.equal(shared.s2, apart.s2)
    torch.testing.assert_close(shared.candles, apart.candles, rtol=1e-6, atol=1e-6)
    assert len({tuple(r) for r in shared.s1[:4].tolist()}) > 1  # the paths do differ
    with pytest.raises(ValueError, match="runs of 5 paths"):
        replace(batch, paths=5)
