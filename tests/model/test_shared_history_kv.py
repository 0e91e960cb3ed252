"""``SharedHistoryKV`` and ``shared_history_attention``: each series' history held once for its
sample paths gives what a cache with the history copied into every path's row gives."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from series_helpers import windows

import kronos_core.model.layers as layers
from kronos_core.engine import GenerationConfig, Generator, SamplingParams, assemble
from kronos_core.engine.job import step_together
from kronos_core.engine.sampling import row_keys
from kronos_core.model.layers import SharedHistoryKV, shared_history_attention

B, P, H, W, T, D = 3, 4, 2, 9, 5, 8
N = B * P


@pytest.fixture(params=["fused kernel", "products"])
def kernel(request, monkeypatch):
    """Both ways of computing the history part: torch's CPU kernel with its log-sum-exp, and
    plain products (other devices, or a torch without that kernel)."""
    if request.param == "products":
        monkeypatch.setattr(layers, "_CPU_FLASH", None)
    else:
        assert layers._CPU_FLASH is not None
    return request.param


def _history(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hist_k, hist_v = (torch.randn(B, H, W, D, generator=g) for _ in range(2))
    real = torch.ones(B, W, dtype=torch.bool)
    real[1, :3] = False  # a left-padded series
    return g, hist_k, hist_v, real


def test_attend_equals_attention_over_copied_histories(kernel):
    g, hist_k, hist_v, real = _history()
    cache = SharedHistoryKV(hist_k, hist_v, P, T, real)
    own_k, own_v = torch.zeros(N, H, T, D), torch.zeros(N, H, T, D)
    for step in range(3):  # slots W, W + 1, W + 2 written one by one
        k, v = torch.randn(N, H, 1, D, generator=g), torch.randn(N, H, 1, D, generator=g)
        cache.write_at(torch.tensor(W + step), k, v)
        own_k[:, :, step], own_v[:, :, step] = k[:, :, 0], v[:, :, 0]
        q = torch.randn(N, H, 1, D, generator=g)
        keys = torch.cat([hist_k.repeat_interleave(P, 0), own_k], dim=2)  # (N, H, W + T, D)
        values = torch.cat([hist_v.repeat_interleave(P, 0), own_v], dim=2)
        sees = torch.cat([
            real.repeat_interleave(P, 0), (torch.arange(T) <= step)[None].expand(N, T)
        ], dim=1)  # (N, W + T)
        want = F.scaled_dot_product_attention(q, keys, values, attn_mask=sees[:, None, None])
        got = cache.attend(q, sees[:, None, None])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert cache.capacity == W + T
    assert [t.shape[0] for t in cache.tensors()] == [B, B, N, N]  # the history once a series


def test_before_any_own_token_a_row_sees_its_history_only(kernel):
    _g, hist_k, hist_v, real = _history(1)
    cache = SharedHistoryKV(hist_k, hist_v, P, T, real)
    q = torch.randn(N, H, 1, D)
    want = F.scaled_dot_product_attention(
        q, hist_k.repeat_interleave(P, 0), hist_v.repeat_interleave(P, 0),
        attn_mask=real.repeat_interleave(P, 0)[:, None, None],
    )
    torch.testing.assert_close(cache.attend(q), want, rtol=1e-5, atol=1e-6)


def test_several_queries_a_row_attend_causally_to_their_own_keys(kernel):
    """The token-to-candle decoder's case: each path's L new tokens see their series' history
    and each other causally."""
    g, hist_k, hist_v, real = _history(2)
    length = 4
    q, own_k, own_v = (torch.randn(N, H, length, D, generator=g) for _ in range(3))
    bias = torch.zeros(B, 1, 1, W).masked_fill(~real[:, None, None], float("-inf"))
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    got = shared_history_attention(q, hist_k, hist_v, bias, own_k, own_v, causal, P)
    sees = torch.cat([
        real.repeat_interleave(P, 0)[:, None, :].expand(N, length, W),
        causal.expand(N, length, length),
    ], dim=-1)[:, None]  # (N, 1, L, W + L)
    want = F.scaled_dot_product_attention(
        q, torch.cat([hist_k.repeat_interleave(P, 0), own_k], 2),
        torch.cat([hist_v.repeat_interleave(P, 0), own_v], 2), attn_mask=sees,
    )
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_it_is_an_inference_cache():
    _g, hist_k, hist_v, _real = _history()
    cache = SharedHistoryKV(hist_k, hist_v, P, T)
    with pytest.raises(ValueError, match="no attention dropout"):
        cache.attend(torch.randn(N, H, 1, D), dropout=0.1)


def _batch(goog, lengths, horizon, paths, seed=5):
    from kronos_core.base.candles import normalize, time_features

    values, xs, ys = windows(goog, [0, 300, 900][: len(lengths)], lengths, horizon)
    keys = list(range(1, len(lengths) + 1))
    return assemble(
        [normalize(v)[0] for v in values], [time_features(x) for x in xs],
        [time_features(y) for y in ys], sample_count=paths,
        row_keys=row_keys(seed, keys, paths),
    )


def test_a_job_with_paths_holds_each_history_once_and_draws_the_same_tokens(tiny, goog):
    """Ragged series, 4 paths each, every row cached to the end: the job's caches are
    ``SharedHistoryKV``s, and its tokens are those of the rows run one by one (``paths=1``, the
    copied caches), its candles too but for rounding."""
    from dataclasses import replace

    gen = Generator(*tiny)
    batch = _batch(goog, [64, 40, 75], 8, 4)
    cfg = GenerationConfig(8, 512, SamplingParams(top_p=0.9))
    job = gen.start(batch, cfg)
    assert job.shares_history
    job.step()  # the prefill
    held = job._cached
    assert held is not None and all(isinstance(c, SharedHistoryKV) for c in held.caches)
    assert isinstance(held.dep, SharedHistoryKV)
    while not job.done:
        job.step()
    shared = job.result()
    apart = gen.generate(replace(batch, paths=1), cfg)
    assert torch.equal(shared.s1, apart.s1) and torch.equal(shared.s2, apart.s2)
    torch.testing.assert_close(shared.candles, apart.candles, rtol=1e-5, atol=1e-5)
    assert len({tuple(r) for r in shared.s1[:4].tolist()}) > 1  # the paths do differ


def test_a_window_that_would_slide_keeps_the_copied_caches(tiny, goog):
    gen = Generator(*tiny)
    batch = _batch(goog, [64, 40, 75], 12, 4)
    assert not gen.start(batch, GenerationConfig(12, 80, SamplingParams())).shares_history
    assert not gen.start(
        batch, GenerationConfig(12, 80, SamplingParams(), sliding="rolling")
    ).shares_history
    assert gen.start(batch, GenerationConfig(12, 512, SamplingParams())).shares_history


def test_shared_history_jobs_share_decode_steps_with_others(tiny, goog):
    """Two jobs with shared histories and one with a single path, stepped together, give what
    each gives alone."""
    gen = Generator(*tiny)
    cfg = GenerationConfig(6, 512, SamplingParams(top_p=0.9))
    batches = [
        _batch(goog, [64, 40], 6, 4, seed=1), _batch(goog, [50, 75, 30], 6, 2, seed=2),
        _batch(goog, [70], 6, 1, seed=3),
    ]
    alone = [gen.generate(b, cfg) for b in batches]
    jobs = [gen.start(b, cfg) for b in batches]
    for job in jobs:
        job.step()  # each prefills alone
    while not all(job.done for job in jobs):
        step_together([job for job in jobs if not job.done])
    for job, want in zip(jobs, alone):
        got = job.result()
        assert torch.equal(got.s1, want.s1) and torch.equal(got.s2, want.s2)
        torch.testing.assert_close(got.candles, want.candles, rtol=1e-6, atol=1e-6)
