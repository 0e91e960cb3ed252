"""The warm-up forecast each step loop runs before its replica reports ready."""

from __future__ import annotations

import numpy as np

from kronos_core.base.options import ForecastOptions
from service.common.messages import Shard

# the warm-up forecast: series, their longest lookback and horizon (run once at load)
WARMUP_SERIES = 8
WARMUP_LOOKBACK = 256
WARMUP_HORIZON = 8


def warmup_shard(max_context: int) -> Shard:
    """A small synthetic forecast that goes through every part of a real one (ragged lookbacks,
    prefill, decode, sampling with a seed, quantiles, detokenize), so the first user request does
    not pay for first-call set-up (allocator, kernels' lazy initialisation)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    longest = max(2, min(WARMUP_LOOKBACK, max_context - WARMUP_HORIZON))
    values, xts, yts = [], [], []
    for i in range(WARMUP_SERIES):
        n = max(2, longest - 16 * i)
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))  # (n,)
        # (n, 6)
        v = np.stack([close, close * 1.01, close * 0.99, close, np.full(n, 1e3), close * 1e3], 1)
        ts = pd.date_range("2024-01-01", periods=n + WARMUP_HORIZON, freq="h").to_numpy()
        values.append(v.astype(np.float32))
        xts.append(ts[:n])
        yts.append(ts[n:])
    options = ForecastOptions(
        horizon=WARMUP_HORIZON, sample_count=2, seed=0, quantiles=(0.1, 0.5, 0.9)
    )
    return Shard("warm-up", 0, values, xts, yts, options)
