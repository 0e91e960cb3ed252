"""Training losses of the tokenizer (BSQ auto-encoder) and of the predictor.

Tokenizer (``tokenizer_loss``): the encoder's unit-norm latent ``z`` is quantised
to ``sign(z) / sqrt(D)`` with a straight-through gradient; the coarse path
decodes the s1 bits alone through ``post_quant_embed_pre``, the full path all
bits through ``post_quant_embed``; loss = MSE(coarse, x) + MSE(full, x) + the
quantiser loss (``kronos_core.model.bsq.bsq_loss``: beta * commitment + zeta *
(gamma0 * per-sample entropy - gamma * codebook entropy), entropies estimated per
group of ``group_size`` bits as in BSQ, arXiv 2406.07548).

Predictor (``predictor_loss``): the frozen tokenizer turns the window into
(s1, s2) ids; the model sees ids 0..W-2 and predicts ids 1..W-1 with teacher
forcing; loss = (CE(s1) + CE(s2)) / 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kronos_core.model import Kronos, KronosTokenizer


@dataclass
class LossParts:
    """A scalar loss to back-propagate and its float parts for logging."""

    loss: torch.Tensor
    parts: dict[str, float]


def weighted_mse(
    pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None
) -> torch.Tensor:
    """MSE over (B, L, 6) with per-feature ``weights`` (6,) normalised to mean 1 (None: plain
    MSE)."""
    err = (pred.float() - target.float()) ** 2  # (B, L, 6)
    if weights is None:
        return err.mean()
    w = weights.to(err.device, err.dtype)
    return (err.mean(dim=(0, 1)) * (w / w.mean())).mean()


def tokenizer_loss(tok: KronosTokenizer, x: torch.Tensor,
                   feature_weights: torch.Tensor | None = None) -> LossParts:
    """MSE of the coarse and of the full reconstruction plus the quantiser loss, through the
    tokenizer's own ``training_forward`` (``kronos_core/model/bsq.py`` has the quantiser loss).
    ``feature_weights`` (6,) weighs the features in both MSEs (None: equal, as the reference)."""
    out = tok.training_forward(x)
    mse_coarse = weighted_mse(out.coarse, x, feature_weights)
    mse_full = weighted_mse(out.full, x, feature_weights)
    q = out.quant
    loss = mse_coarse + mse_full + q.total
    close_err = (out.full[..., 3].float() - x[..., 3].float()).abs().mean()
    return LossParts(
        loss,
        {
            "mse_coarse": mse_coarse.item(), "mse_full": mse_full.item(), "quant": q.total.item(),
            "close_mae": close_err.item(), "commit": q.commitment.item(),
            "sample_entropy": q.sample_entropy.item(),
            "codebook_entropy": q.codebook_entropy.item(),
        },
    )


def predictor_loss(
    model: Kronos, tok: KronosTokenizer, x: torch.Tensor, stamp: torch.Tensor
) -> LossParts:
    """Teacher-forced CE: x (B, W, 6) normalised candles, stamp (B, W, 5); tokenizer frozen."""
    with torch.no_grad():
        s1, s2 = tok.encode(x)  # (B, W) each
    # (B, W-1, V1), (B, W-1, V2)
    s1_logits, s2_logits = model(s1[:, :-1], s2[:, :-1], stamp[:, :-1], s1[:, 1:])
    ce1 = F.cross_entropy(s1_logits.float().flatten(0, 1), s1[:, 1:].flatten())
    ce2 = F.cross_entropy(s2_logits.float().flatten(0, 1), s2[:, 1:].flatten())
    return LossParts((ce1 + ce2) / 2, {"ce_s1": ce1.item(), "ce_s2": ce2.item()})
