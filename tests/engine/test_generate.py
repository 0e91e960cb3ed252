"""The generation loop against a plain full-recompute loop, padding, and the rolling cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kronos_core.base.candles import FEATURES, normalize, time_features
from kronos_core.engine import GenerationConfig, Generator, SamplingParams, assemble

GREEDY = SamplingParams(top_k=1)


def _batch(df, starts, lookbacks, horizon, sample_count=1):
    xs, xst, yst = [], [], []
    for s, lb in zip(starts, lookbacks):
        part = df.iloc[s : s + lb + horizon]
        xs.append(normalize(part.iloc[:lb][list(FEATURES)].to_numpy(np.float32))[0])
        xst.append(time_features(part["timestamps"].iloc[:lb]))
        yst.append(time_features(part["timestamps"].iloc[lb:]))
    return assemble(xs, xst, yst, sample_count)


def test_left_padded_tokenizer_matches_unpadded(tiny, goog):
    _, tok = tiny
    batch = _batch(goog, [0, 500], [30, 70], 1)
    with torch.inference_mode():
        s1, s2 = tok.encode(batch.x, batch.pad)
        a1, a2 = tok.encode(batch.x[:1, 40:])  # row 0 alone, without its padding
    assert torch.equal(s1[0, 40:], a1[0]) and torch.equal(s2[0, 40:], a2[0])
    with torch.inference_mode():
        dec = tok.decode(s1, s2, batch.pad)
        alone = tok.decode(a1, a2)
    torch.testing.assert_close(dec[0, 40:], alone[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("max_context", [200, 50])
def test_exact_mode_tokens_equal_recompute(tiny, goog, max_context):
    gen = Generator(*tiny)
    batch = _batch(goog, [0, 300, 900], [40, 64, 25], 30)
    exact = gen.generate(batch, GenerationConfig(30, max_context, GREEDY, "exact"))
    slow = gen.generate(batch, GenerationConfig(30, max_context, GREEDY, "recompute"))
    assert torch.equal(exact.s1, slow.s1) and torch.equal(exact.s2, slow.s2)
    torch.testing.assert_close(exact.candles, slow.candles, rtol=1e-5, atol=1e-6)
    assert exact.stats.tokens_generated == 3 * 30
    if max_context == 50:
        assert exact.stats.recomputed_row_steps > 0  # rows slid and were recomputed
    else:
        assert exact.stats.recomputed_row_steps == 0


def test_rolling_mode_equals_exact_until_the_window_slides(tiny, goog):
    gen = Generator(*tiny)
    batch = _batch(goog, [1000], [60], 20)
    exact = gen.generate(batch, GenerationConfig(20, 64, GREEDY, "exact"))
    rolling = gen.generate(batch, GenerationConfig(20, 64, GREEDY, "rolling"))
    # steps 0..4 see at most 64 tokens: identical; later steps may differ (approximation)
    assert torch.equal(exact.s1[:, :5], rolling.s1[:, :5]) and torch.equal(
        exact.s2[:, :5], rolling.s2[:, :5]
    )
    assert rolling.stats.recomputed_row_steps == 0 and exact.stats.recomputed_row_steps > 0


def test_config_validation():
    with pytest.raises(ValueError, match="horizon"):
        GenerationConfig(0)
    with pytest.raises(ValueError, match="sliding"):
        GenerationConfig(5, sliding="fast")


@pytest.mark.slow
def test_compiled_decode_step_gives_the_same_tokens(tiny, goog):
    """torch.compile of the decode step (inductor on CPU here; meant for GPUs) changes nothing."""
    gen = Generator(*tiny)
    batch = _batch(goog, [0, 300], [64, 40], 10)
    eager = gen.generate(batch, GenerationConfig(10, 128, GREEDY))
    compiled = gen.generate(batch, GenerationConfig(10, 128, GREEDY, compile=True))
    assert torch.equal(eager.s1, compiled.s1) and torch.equal(eager.s2, compiled.s2)
    torch.testing.assert_close(eager.candles, compiled.candles, rtol=1e-4, atol=1e-5)


def _assert_same_forecast(a, b):
    assert torch.equal(a.s1, b.s1) and torch.equal(a.s2, b.s2)
    torch.testing.assert_close(a.candles, b.candles, rtol=0, atol=0)


def test_bfloat16_autocast_runs_every_mode(tiny, goog):
    """The GPU option (bf16 autocast) exercised on CPU: finite forecasts; the cached engine equals
    full recompute in that precision (tokens and decoded candles), with a row whose window
    slides."""
    gen = Generator(*tiny)
    batch = _batch(goog, [0, 300], [64, 40], 8)
    out = {
        mode: gen.generate(
            batch, GenerationConfig(8, 48, GREEDY, mode, autocast_dtype=torch.bfloat16)
        )
        for mode in ("exact", "rolling", "recompute")
    }
    for res in out.values():
        assert res.candles.dtype == torch.float32 and torch.isfinite(res.candles).all()
    assert out["exact"].stats.recomputed_row_steps > 0  # the 64-candle row slid
    _assert_same_forecast(out["exact"], out["recompute"])


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_rolling_equals_exact_when_nothing_slides(tiny, goog, dtype):
    """With every window inside max_context the rolling cache is exact: same tokens, same
    candles."""
    gen = Generator(*tiny)
    batch = _batch(goog, [0, 300, 900], [64, 40, 25], 12)
    exact = gen.generate(batch, GenerationConfig(12, 128, GREEDY, "exact", autocast_dtype=dtype))
    rolling = gen.generate(
        batch, GenerationConfig(12, 128, GREEDY, "rolling", autocast_dtype=dtype)
    )
    _assert_same_forecast(exact, rolling)
    assert exact.stats.recomputed_row_steps == 0 == rolling.stats.recomputed_row_steps
