"""``max_batch_that_fits`` inverts ``estimate_inference_bytes`` for every option it takes, and its
defaults are the estimate's (the service sizes its shards with it)."""

from __future__ import annotations

import pytest
import torch

from kronos_core.engine.memory import estimate_inference_bytes, max_batch_that_fits


@pytest.mark.parametrize(
    "opts",
    [
        {},  # every default
        {"sample_count": 3},
        {"dtype": torch.bfloat16},
        {"max_context": 256},  # the window slides: lookback 600 > context
        {"include_weights": False},
        {"sample_count": 2, "dtype": torch.bfloat16, "max_context": 384, "include_weights": False},
    ],
)
def test_max_batch_inverts_the_estimate_with_each_option(tiny, opts):
    m, t = tiny[0].config, tiny[1].config
    lookback, horizon, k = 600, 24, 5
    budget = estimate_inference_bytes(m, t, k, lookback, horizon, **opts)
    n = max_batch_that_fits(m, t, budget, lookback, horizon, **opts)
    assert n == k and type(n) is int
    assert max_batch_that_fits(m, t, budget - 1, lookback, horizon, **opts) == k - 1


def test_options_change_the_answer(tiny):
    """Each option reaches the estimate (so dropping one is not harmless)."""
    m, t = tiny[0].config, tiny[1].config
    budget = estimate_inference_bytes(m, t, 9, 600, 24)
    base = max_batch_that_fits(m, t, budget, 600, 24)
    assert base == 9
    for opts in ({"sample_count": 2}, {"dtype": torch.bfloat16}, {"max_context": 256}):
        assert max_batch_that_fits(m, t, budget, 600, 24, **opts) != base, opts
    small = estimate_inference_bytes(m, t, 2, 16, 2)  # short series: the weights weigh
    assert max_batch_that_fits(m, t, small, 16, 2) == 2
    assert max_batch_that_fits(m, t, small, 16, 2, include_weights=False) > 2
