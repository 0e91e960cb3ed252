"""Training losses of the tokenizer (BSQ auto-encoder) and of the predictor.

Tokenizer (``tokenizer_loss``): the encoder's unit-norm latent ``z`` is quantised
to ``sign(z) / sqrt(D)`` with a straight-through gradient; the coarse path
decodes the s1 bits alone through ``post_quant_embed_pre``, the full path all
bits through ``post_quant_embed``; loss = MSE(coarse, x) + MSE(full, x) + the
quantiser loss (``bsq_quantizer_loss``: beta * commitment + zeta * (gamma0 *
per-sample entropy - gamma * codebook entropy), entropies estimated per group of
``group_size`` bits as in BSQ, arXiv 2406.07548).

Predictor (``predictor_loss``): the frozen tokenizer turns the window into
(s1, s2) ids; the model sees ids 0..W-2 and predicts ids 1..W-1 with teacher
forcing; loss = (CE(s1) + CE(s2)) / 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kronos_core.model import Kronos, KronosTokenizer

# Inverse temperature of the soft code assignment used by the entropy terms.
BSQ_INV_TEMPERATURE = 100.0


@dataclass
class LossParts:
    """A scalar loss to back-propagate and its float parts for logging."""

    loss: torch.Tensor
    parts: dict[str, float]


def group_codes(group_size: int, dim: int, device=None) -> torch.Tensor:
    """All 2^g sign patterns of one group, scaled like the quantised code: (2^g, g), entries ±1/sqrt(dim)."""
    ids = torch.arange(2**group_size, device=device)
    bits = ((ids[:, None] >> torch.arange(group_size, device=device)) & 1).float()  # (2^g, g), LSB first
    return (2 * bits - 1) / math.sqrt(dim)


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.log(p.clamp_min(1e-12))).sum(-1)


def bsq_entropies(z: torch.Tensor, group_size: int, inv_temperature: float = BSQ_INV_TEMPERATURE):
    """Per-sample and codebook entropies of the soft assignment of z (N, D) to the sign codes.

    Each group of ``group_size`` bits gets a softmax over its 2^g codes with
    logits ``2 * inv_temperature * <z_group, code>`` (the negative squared
    distance up to a constant). Returns (mean over samples of the summed group
    entropies, summed entropies of the mean group distributions).
    """
    n, dim = z.shape
    if dim % group_size:
        raise ValueError(f"codebook of {dim} bits is not divisible into groups of {group_size}")
    codes = group_codes(group_size, dim, z.device)  # (2^g, g)
    groups = z.float().view(n, dim // group_size, group_size)  # (N, G, g)
    probs = torch.softmax(2 * inv_temperature * groups @ codes.T, dim=-1)  # (N, G, 2^g)
    per_sample = _entropy(probs).sum(-1).mean()
    codebook = _entropy(probs.mean(0)).sum()
    return per_sample, codebook


def bsq_quantizer_loss(z: torch.Tensor, hard: torch.Tensor, cfg) -> tuple[torch.Tensor, dict[str, float]]:
    """z, hard (..., D): latent and its sign code. ``cfg``: a TokenizerConfig (beta, gamma0, gamma, zeta, group_size)."""
    flat_z, flat_hard = z.reshape(-1, z.shape[-1]), hard.reshape(-1, hard.shape[-1])  # (N, D)
    commit = (flat_hard.detach() - flat_z).pow(2).sum(-1).mean()
    per_sample, codebook = bsq_entropies(flat_z, cfg.group_size)
    loss = cfg.beta * commit + cfg.zeta * (cfg.gamma0 * per_sample - cfg.gamma * codebook)
    return loss, {"commit": commit.item(), "sample_entropy": per_sample.item(), "codebook_entropy": codebook.item()}


def tokenizer_forward(tok: KronosTokenizer, x: torch.Tensor):
    """Training pass of the tokenizer: x (B, L, d_in) -> (coarse (B, L, d_in), full (B, L, d_in), z, hard).

    z (B, L, D) is the unit-norm latent, hard its sign code ±1/sqrt(D); the decoders
    receive ``z + (hard - z).detach()`` (straight-through).
    """
    c = tok.config
    z = tok.encode_latent(x)  # (B, L, D)
    hard = torch.where(z > 0, 1.0, -1.0).to(z.dtype) / math.sqrt(c.codebook_dim)  # (B, L, D)
    code = z + (hard - z).detach()  # (B, L, D), gradient flows to z
    coarse = tok.decode_code(tok.post_quant_embed_pre(code[..., : c.s1_bits]))  # (B, L, d_in)
    full = tok.decode_code(tok.post_quant_embed(code))  # (B, L, d_in)
    return coarse, full, z, hard


def tokenizer_loss(tok: KronosTokenizer, x: torch.Tensor) -> LossParts:
    """MSE of the coarse and of the full reconstruction plus the quantiser loss."""
    coarse, full, z, hard = tokenizer_forward(tok, x)
    mse_coarse = F.mse_loss(coarse.float(), x.float())
    mse_full = F.mse_loss(full.float(), x.float())
    quant, parts = bsq_quantizer_loss(z, hard, tok.config)
    loss = mse_coarse + mse_full + quant
    return LossParts(loss, {"mse_coarse": mse_coarse.item(), "mse_full": mse_full.item(), "quant": quant.item(), **parts})


def predictor_loss(model: Kronos, tok: KronosTokenizer, x: torch.Tensor, stamp: torch.Tensor) -> LossParts:
    """Teacher-forced CE: x (B, W, 6) normalised candles, stamp (B, W, 5); tokenizer frozen."""
    with torch.no_grad():
        s1, s2 = tok.encode(x)  # (B, W) each
    s1_logits, s2_logits = model(s1[:, :-1], s2[:, :-1], stamp[:, :-1], s1[:, 1:])  # (B, W-1, V1), (B, W-1, V2)
    ce1 = F.cross_entropy(s1_logits.float().flatten(0, 1), s1[:, 1:].flatten())
    ce2 = F.cross_entropy(s2_logits.float().flatten(0, 1), s2[:, 1:].flatten())
    return LossParts((ce1 + ce2) / 2, {"ce_s1": ce1.item(), "ce_s2": ce2.item()})
