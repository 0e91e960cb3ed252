"""Binary spherical quantisation (BSQ, arXiv 2406.07548) for training the tokenizer.

Inference needs only the sign bits (``KronosTokenizer.encode``). Training also
needs the straight-through estimator, so reconstruction gradients reach the
encoder, and the quantiser loss:

    beta * commitment + zeta * (gamma0 * per-sample entropy - gamma * codebook entropy)

Entropies are estimated per group of ``group_size`` consecutive bits: each group
is a sub-codebook of ``2^group_size`` corners of the sphere, the soft assignment
of a latent to a corner is ``softmax(2 * inv_temperature * <u, c>)``
(``-inv_temperature * ||u - c||^2`` up to a constant), and each entropy sums over
the groups. ``inv_temperature`` is 100 (``INV_TEMPERATURE``): the value that trained
the bundled model. At 1 the assignment cannot get sharp (with u and c of norm 1 the
logits of a group of 4 bits stay within +-1), so the per-sample entropy term could not
do its job. Low per-sample entropy makes every latent sit near one corner;
high codebook entropy (the batch-average assignment) makes all corners used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# of the soft code assignment in the entropy terms (see the module docstring)
INV_TEMPERATURE = 100.0


@dataclass
class QuantizerLoss:
    total: torch.Tensor  # () the weighted loss to add to the reconstruction losses
    commitment: torch.Tensor  # () mean over tokens of ||code - u||^2 (not weighted)
    sample_entropy: torch.Tensor  # () mean per-token entropy, summed over groups (nats)
    # () entropy of the batch-average assignment, summed over groups (nats)
    codebook_entropy: torch.Tensor


def quantize_ste(z: torch.Tensor) -> torch.Tensor:
    """Unit-norm latent z (..., D) -> code (..., D) with entries ±1/sqrt(D) (+ where z > 0).

    The forward value is the quantised code; the gradient is the identity (straight-through).
    """
    code = torch.where(z > 0, 1.0, -1.0).to(z.dtype) / math.sqrt(z.shape[-1])  # (..., D)
    return z + (code - z).detach()


def _group_corners(
    group_size: int, scale: float, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """All 2^group_size sign patterns (least significant bit first), scaled: (2^g, g)."""
    ids = torch.arange(2**group_size, device=device)[:, None]  # (C, 1)
    bits = (ids >> torch.arange(group_size, device=device)) & 1  # (C, g)
    return (bits * 2 - 1).to(dtype) * scale


def _entropy(p: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dim (nats): (..., C) -> (...)."""
    return -(p * torch.log(p.clamp_min(1e-12))).sum(-1)


def bsq_loss(
    z: torch.Tensor, code: torch.Tensor, beta: float, gamma0: float, gamma: float, zeta: float,
    group_size: int, weight: torch.Tensor | None = None, inv_temperature: float = INV_TEMPERATURE,
) -> QuantizerLoss:
    """Quantiser loss of unit-norm latents z (..., D) and their codes (``quantize_ste``).

    weight (...,) optional 0/1 mask of tokens to count (e.g. real, unpadded rows).
    D must be a multiple of ``group_size``.
    """
    dim = z.shape[-1]
    if dim % group_size:
        raise ValueError(
            f"codebook dim {dim} (s1_bits + s2_bits) is not a multiple of group_size {group_size}"
        )
    u = z.reshape(-1, dim).float()  # (T, D)
    # (T,)
    w = torch.ones(u.shape[0], device=u.device) if weight is None else weight.reshape(-1).float()
    n = w.sum().clamp_min(1.0)
    commitment = (((code.detach().reshape(-1, dim).float() - u) ** 2).sum(-1) * w).sum() / n
    corners = _group_corners(group_size, 1 / math.sqrt(dim), u.device, u.dtype)  # (C, g)
    groups = u.view(u.shape[0], dim // group_size, group_size)  # (T, G, g)
    prob = torch.softmax(2 * inv_temperature * groups @ corners.T, dim=-1)  # (T, G, C)
    sample_entropy = (_entropy(prob).sum(-1) * w).sum() / n
    mean_prob = (prob * w[:, None, None]).sum(0) / n  # (G, C)
    codebook_entropy = _entropy(mean_prob).sum()
    total = beta * commitment + zeta * (gamma0 * sample_entropy - gamma * codebook_entropy)
    return QuantizerLoss(total, commitment, sample_entropy, codebook_entropy)
