"""Building blocks: the fused RMS norm, the rotary of pairs and the blocked causal attention
give the written-out formulas' numbers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kronos_core.model.layers import (
    CAUSAL_BLOCKS_FROM,
    RMSNorm,
    Rotary,
    SelfAttention,
    apply_rotary,
    causal_attention,
    pair_order,
    rotate_pairs,
)


def _written_out(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + norm.eps)
    return normed.type_as(x) * norm.weight


def test_the_fused_rms_norm_is_the_formula_bit_for_bit_on_a_cpu():
    norm = RMSNorm(128)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e3):
        x = torch.randn(4, 300, 128, generator=g) * scale
        assert torch.equal(norm(x), _written_out(norm, x))


def test_low_precision_input_keeps_the_formula_and_gradients_flow():
    norm = RMSNorm(16)
    x = torch.randn(3, 16).bfloat16()
    assert torch.equal(norm(x), _written_out(norm, x))
    y = torch.randn(3, 16, requires_grad=True)
    norm(y).sum().backward()
    assert y.grad is not None and norm.weight.grad is not None


def test_rotating_pairs_is_apply_rotary_bit_for_bit_in_the_pair_order():
    g = torch.Generator().manual_seed(1)
    rotary = Rotary(32)
    positions = torch.randint(0, 4000, (3, 57), generator=g)  # (B, L), a large angle included
    rope = rotary.angles(positions)  # (B, 1, L, D) each
    order = pair_order(4, 32).view(4, 32)[0]  # (D,) one head's order (the same in every head)
    for dtype in (torch.float32, torch.bfloat16):
        qk = (torch.randn(3, 57, 2, 4, 32, generator=g) * 5).to(dtype)  # (B, L, 2, H, D)
        expected = apply_rotary(qk.permute(2, 0, 3, 1, 4), rope)  # (2, B, H, L, D)
        paired = qk[..., order]  # the same numbers in pair order
        rotated = rotate_pairs(paired, rope)  # (2, B, H, L, D)
        assert rotated.is_contiguous()
        assert torch.equal(rotated, expected[..., order])


def test_the_pair_order_keeps_each_head_and_pairs_its_halves():
    order = pair_order(2, 8)
    assert order.tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


def test_the_fused_projection_gives_the_separate_layers_q_k_and_v_and_the_same_attention():
    torch.manual_seed(2)
    attn = SelfAttention(128, 4).eval()
    x = torch.randn(2, 40, 128)
    rope = attn.rotary.angles(torch.arange(40).repeat(2, 1))
    order = pair_order(4, 32).view(4, 32)[0]
    with torch.no_grad():
        fused = attn.project(x, rope)  # the CPU's one product, q and k in pair order
        fused_out = attn(x, rope)
    separate = attn.project(x, rope)  # gradients on: the three layers and apply_rotary
    separate_out = attn(x, rope)
    for a, b, paired in zip(fused, separate, (True, True, False), strict=True):
        assert a.shape == (2, 4, 40, 32)
        b = b.detach()[..., order] if paired else b.detach()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    torch.testing.assert_close(fused_out, separate_out.detach(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("length", [CAUSAL_BLOCKS_FROM - 1, CAUSAL_BLOCKS_FROM, 251, 256])
@pytest.mark.parametrize("head_dim", [16, 32])
def test_blocked_causal_attention_is_the_one_call_but_for_rounding(length, head_dim, monkeypatch):
    """torch's kernel in blocks (the compiled kernel, tests/model/test_native_attention.py, off)."""
    monkeypatch.setenv("KRONOS_NATIVE_ATTENTION", "0")
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(3, 4, length, head_dim, generator=g) * 3 for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.no_grad():
        got = causal_attention(q, k, v)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # the first query sees only the first key; the last query every key
    torch.testing.assert_close(got[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-6)
