"""Sampling: filtering semantics, greedy, and the counter-based seeded generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kronos_core.engine.sampling import (
    SamplingParams,
    counter_uniforms,
    filter_logits,
    row_keys,
    sample_tokens,
)


def test_top_k_keeps_exactly_k():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]])
    out = filter_logits(logits, SamplingParams(top_k=2, top_p=0.5))  # top_p ignored when top_k > 0
    assert torch.isfinite(out).tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.7)))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.4)))
    assert kept.tolist() == [[True, False, False, False]]  # the most likely token is always kept
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=1.0)))
    assert kept.all()


def test_temperature_scales_logits():
    logits = torch.tensor([[1.0, 2.0]])
    out = filter_logits(logits, SamplingParams(temperature=0.5, top_p=1.0))
    torch.testing.assert_close(out, torch.tensor([[2.0, 4.0]]))


def test_greedy_is_argmax():
    logits = torch.randn(16, 1024)
    assert torch.equal(sample_tokens(logits, SamplingParams(top_k=1), None), logits.argmax(-1))


def test_inverse_cdf_follows_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(20000, 3)
    u = torch.from_numpy(np.random.default_rng(0).random(20000))
    tokens = sample_tokens(logits, SamplingParams(top_p=1.0), u)
    freq = torch.bincount(tokens, minlength=3).double() / 20000
    torch.testing.assert_close(freq, probs.double(), atol=0.015, rtol=0)


def test_counter_uniforms_depend_only_on_row_key():
    keys = row_keys(42, [11, 22, 33], sample_count=2)  # 6 rows
    assert len(set(keys.tolist())) == 6
    u_all = counter_uniforms(keys, step=5, kind=1)
    u_one = counter_uniforms(keys[3:4], step=5, kind=1)
    assert u_all[3].item() == u_one[0].item()
    assert ((u_all >= 0) & (u_all < 1)).all()
    assert not torch.equal(counter_uniforms(keys, 5, 0), u_all)
    assert not torch.equal(counter_uniforms(keys, 6, 1), u_all)
    # the same series key gives the same row keys whatever else is in the list
    assert row_keys(42, [22], 2).tolist() == keys[2:4].tolist()


@pytest.mark.parametrize("bad", [dict(temperature=0), dict(top_k=-1), dict(top_p=0), dict(top_p=1.5)])
def test_invalid_params(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)
