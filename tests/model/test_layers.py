"""Building blocks: the fused RMS norm gives the written-out formula's numbers."""

from __future__ import annotations

import torch

from kronos_core.model.layers import RMSNorm


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
