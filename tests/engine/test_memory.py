"""Memory model: monotone, inverts to a batch size, and bounds the measured peak."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from kronos_core import KronosPredictor
from kronos_core.engine.memory import (
    LiveTensorMeter,
    estimate_inference_bytes,
    max_batch_that_fits,
    memory_breakdown,
)


def test_estimate_grows_with_every_dimension(tiny):
    m, t = tiny[0].config, tiny[1].config
    base = estimate_inference_bytes(m, t, 10, 200, 20)
    assert estimate_inference_bytes(m, t, 20, 200, 20) > base
    assert estimate_inference_bytes(m, t, 10, 400, 20) > base
    assert estimate_inference_bytes(m, t, 10, 200, 40) > base
    assert estimate_inference_bytes(m, t, 10, 200, 20, sample_count=3) > base
    assert estimate_inference_bytes(m, t, 10, 200, 20, dtype=torch.bfloat16) < base
    assert estimate_inference_bytes(m, t, 0, 200, 20) == 0


def test_max_batch_inverts_the_estimate(tiny):
    m, t = tiny[0].config, tiny[1].config
    budget = 256 * 2**20
    n = max_batch_that_fits(m, t, budget, 400, 24, 2)
    assert n > 0
    assert estimate_inference_bytes(m, t, n, 400, 24, 2) <= budget
    assert estimate_inference_bytes(m, t, n + 1, 400, 24, 2) > budget
    assert max_batch_that_fits(m, t, 1000, 400, 24) == 0


def test_weights_counted_exactly(tiny):
    model, tok = tiny
    params = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in tok.parameters())
    assert memory_breakdown(model.config, tok.config, 1, 10, 1).weights == 4 * params


def test_estimate_bounds_measured_peak(tiny):
    """The estimate is above the measured peak of live tensors, and not wildly (< 2x)."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=512)
    rng = np.random.default_rng(0)
    n, lookback, horizon, samples = 12, 300, 24, 2
    values = [np.abs(rng.normal(10, 1, (lookback, 6))).astype(np.float32) for _ in range(n)]
    ts = pd.date_range("2024-01-02 09:35", periods=lookback + horizon, freq="5min")
    meter = LiveTensorMeter()
    with meter:
        predictor.forecast(values, [ts[:lookback]] * n, [ts[lookback:]] * n, horizon, sample_count=samples, seed=0)
    est = estimate_inference_bytes(
        tiny[0].config, tiny[1].config, n, lookback, horizon, samples, include_weights=False
    )
    assert meter.peak > 0
    assert meter.peak <= est < 2 * meter.peak
