"""Building blocks: the fused RMS norm and the rotary on the product's layout give the
written-out formulas' numbers."""

from __future__ import annotations

import torch

from kronos_core.model.layers import RMSNorm, Rotary, SelfAttention, apply_rotary, rotate_heads


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


def test_rotating_on_the_products_layout_is_apply_rotary_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    rotary = Rotary(32)
    positions = torch.randint(0, 4000, (3, 57), generator=g)  # (B, L), a large angle included
    rope = rotary.angles(positions)  # (B, 1, L, D) each
    for dtype in (torch.float32, torch.bfloat16):
        qk = (torch.randn(3, 57, 2, 4, 32, generator=g) * 5).to(dtype)  # (B, L, 2, H, D)
        expected = apply_rotary(qk.permute(2, 0, 3, 1, 4), rope)  # (2, B, H, L, D)
        assert torch.equal(rotate_heads(qk, rope).permute(2, 0, 3, 1, 4), expected)


def test_the_fused_projection_gives_the_separate_layers_rotated_q_k_and_v():
    torch.manual_seed(2)
    attn = SelfAttention(128, 4).eval()
    x = torch.randn(2, 40, 128)
    rope = attn.rotary.angles(torch.arange(40).repeat(2, 1))
    with torch.no_grad():
        fused = attn.project(x, rope)  # the CPU's one product and rotate_heads
    separate = attn.project(x, rope)  # gradients on: the three layers and apply_rotary
    for a, b in zip(fused, separate, strict=True):
        assert a.shape == (2, 4, 40, 32)
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-5)
