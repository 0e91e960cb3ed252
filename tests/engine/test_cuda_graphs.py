"""The cuda_graphs flag: from the CLI/config to the engine; ignored (logged) on a CPU; on CUDA it
compiles the decode step with mode="reduce-overhead" (the wiring is checked here without a GPU)."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pytest
import torch

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import ForecastOptions
from kronos_core.engine import GenerationConfig, Generator
from kronos_core.engine import generate as generate_module
from kronos_core.engine.job import decode_step
from kronos_core.loading import (
    PredictorConfig,
    add_predictor_arguments,
    build_predictor,
    predictor_config_from_args,
)


def _series(df, horizon):
    part = df.iloc[:64 + horizon]
    return ([part.iloc[:64][list(FEATURES)].to_numpy(np.float32)], [part["timestamps"].iloc[:64]],
            [part["timestamps"].iloc[64:]])


def test_cli_flag_reaches_the_predictor_config():
    parser = argparse.ArgumentParser()
    add_predictor_arguments(parser)
    assert predictor_config_from_args(parser.parse_args(["--cuda-graphs"])).cuda_graphs is True
    assert predictor_config_from_args(parser.parse_args([])).cuda_graphs is False


def test_service_setting_reaches_the_predictor_config(monkeypatch):
    settings = pytest.importorskip("service.common.settings")
    monkeypatch.setenv("KRONOS_CUDA_GRAPHS", "1")
    assert settings.Settings().predictor_config(device="cpu").cuda_graphs is True


def test_on_cpu_the_flag_reaches_the_engine_is_logged_and_changes_nothing(tiny, goog, caplog):
    plain = build_predictor(*tiny, PredictorConfig(device="cpu", max_context=128))
    with caplog.at_level(logging.WARNING, logger="kronos_core.engine.generate"):
        graphed = build_predictor(
            *tiny, PredictorConfig(device="cpu", max_context=128, cuda_graphs=True)
        )
    assert graphed.cuda_graphs is True
    assert [r.getMessage() for r in caplog.records] == [
        generate_module.CPU_GRAPHS_IGNORED.format(device="cpu")
    ]
    options = ForecastOptions(6, sample_count=2, seed=5)
    job = graphed.start_forecast(*_series(goog, 6), options)
    assert job.generation.cfg.cuda_graphs is True  # the engine got the flag
    # eager on a CPU
    assert graphed.generator.decode_fn(job.generation.cfg, graphed.device) is decode_step
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kronos_core.engine.generate"):
        while not job.done:
            job.step()
    assert not caplog.records  # logged once, at load
    np.testing.assert_array_equal(
        job.result().paths, plain.forecast(*_series(goog, 6), options).paths
    )


def test_on_cuda_the_decode_step_is_compiled_for_cuda_graphs(tiny, monkeypatch):
    """No GPU here: check that a CUDA device asks torch.compile for reduce-overhead, static shapes,
    and that each call marks a new step and copies the outputs out of the graph's buffers."""
    calls = []

    def fake_compile(fn, **kwargs):
        calls.append((fn, kwargs))
        return lambda *args: (torch.ones(2, 1, 3), torch.ones(2, 4, dtype=torch.bool))

    marks = []
    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    gen = Generator(*tiny)
    cfg = GenerationConfig(4, cuda_graphs=True)
    cuda = torch.device("cuda")
    assert gen.graphs_active(cfg, cuda) and not gen.graphs_active(GenerationConfig(4), cuda)
    limit = torch._dynamo.config.recompile_limit
    try:
        torch._dynamo.config.recompile_limit = 8
        step = gen.decode_fn(cfg, cuda)
        # room for many step sizes
        assert torch._dynamo.config.recompile_limit == generate_module.GRAPH_SIZES
    finally:
        torch._dynamo.config.recompile_limit = limit
    hidden, mask = step("model", "and", "the", "rest")
    gen.decode_fn(cfg, cuda)  # compiled once, kept
    assert calls == [(decode_step, {"mode": "reduce-overhead", "dynamic": False})]
    assert marks == [1] and hidden.shape == (2, 1, 3) and mask.dtype == torch.bool


@pytest.mark.slow
def test_the_reduce_overhead_compile_gives_the_same_tokens(tiny):
    """torch.compile(mode="reduce-overhead", dynamic=False) of the decode step, run on a CPU
    (inductor; the CUDA-graph part is skipped off CUDA): the fixed-shape step compiles and changes
    no token."""
    from kronos_core.base.candles import normalize, time_features
    from kronos_core.cli.bench import synthetic_series
    from kronos_core.engine import SamplingParams, assemble

    values, xs, ys = synthetic_series(3, 50, 8, 0)
    values[1], xs[1] = values[1][10:], xs[1][10:]  # ragged
    batch = assemble([normalize(v)[0] for v in values], [time_features(x) for x in xs],
                     [time_features(y) for y in ys], 2)
    gen = Generator(*tiny)
    eager = gen.generate(batch, GenerationConfig(8, 128, SamplingParams(top_k=1)))
    # as on CUDA
    gen.graphs_active = lambda cfg, device: cfg.cuda_graphs  # type: ignore[method-assign]
    limit = torch._dynamo.config.recompile_limit
    try:
        graphed = gen.generate(
            batch, GenerationConfig(8, 128, SamplingParams(top_k=1), cuda_graphs=True)
        )
    finally:
        torch._dynamo.config.recompile_limit = limit
    assert torch.equal(eager.s1, graphed.s1) and torch.equal(eager.s2, graphed.s2)


def test_kronos_serve_flag_reaches_the_predictor_config():
    cli = pytest.importorskip("service.cli")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    settings = cli.settings_from_args(parser.parse_args(["--cuda-graphs"]))
    assert (
        settings.cuda_graphs is True and settings.predictor_config(device="cpu").cuda_graphs is True
    )
    assert cli.settings_from_args(parser.parse_args([])).cuda_graphs is False
