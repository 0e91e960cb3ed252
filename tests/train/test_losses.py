"""Each loss on a tiny case against a direct computation."""

from __future__ import annotations

import itertools
import math

import torch

from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig
from kronos_core.model.bsq import bsq_loss, quantize_ste
from kronos_core.train.losses import predictor_loss, tokenizer_loss


def _tokenizer(bits=4, group=4) -> KronosTokenizer:
    torch.manual_seed(0)
    cfg = TokenizerConfig(d_in=6, d_model=16, n_heads=2, ff_dim=32, n_enc_layers=2, n_dec_layers=2,
                          s1_bits=bits, s2_bits=bits, group_size=group)
    return KronosTokenizer(cfg).eval()


def _entropy(p):
    return -(p * p.clamp_min(1e-12).log()).sum(-1)


def test_tokenizer_loss_matches_direct_computation():
    tok = _tokenizer()
    x = torch.randn(3, 10, 6)
    out = tokenizer_loss(tok, x)
    c = tok.config
    with torch.no_grad():
        z = tok.encode_latent(x)  # (3, 10, 8)
        s1, s2 = tok.encode(x)
        full = tok.decode(s1, s2)  # the inference decoder on the token ids
        hard = torch.where(z > 0, 1.0, -1.0) / math.sqrt(8)
        coarse = tok.decode_code(tok.post_quant_embed_pre(hard[..., :4]))
        commit = ((hard - z) ** 2).sum(-1).mean()
        flat = z.reshape(-1, 8)
        # per-sample entropy over the whole 2^8 codebook; codebook entropy per group of 4 bits
        # (256, 8)
        codes = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=8))) / math.sqrt(8)
        per_sample = _entropy(torch.softmax(200 * flat @ codes.T, -1)).mean()
        # (16, 4)
        group_codes = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=4))) / math.sqrt(8)
        codebook = sum(
            _entropy(torch.softmax(200 * flat[:, g : g + 4] @ group_codes.T, -1).mean(0))
            for g in (0, 4)
        )
        quant = c.beta * commit + c.zeta * (c.gamma0 * per_sample - c.gamma * codebook)
        expected = ((coarse - x) ** 2).mean() + ((full - x) ** 2).mean() + quant
    torch.testing.assert_close(out.loss.detach(), expected, rtol=1e-4, atol=1e-5)
    assert abs(out.parts["mse_full"] - float(((full - x) ** 2).mean())) < 1e-5


def test_grouped_per_sample_entropy_equals_full_codebook_entropy():
    z = torch.nn.functional.normalize(torch.randn(50, 8), dim=-1)
    per_sample = bsq_loss(
        z, quantize_ste(z), 0.05, 1.0, 1.1, 0.05, group_size=2, inv_temperature=3.0
    ).sample_entropy
    codes = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=8))) / math.sqrt(8)
    direct = _entropy(torch.softmax(2 * 3.0 * z @ codes.T, -1)).mean()
    torch.testing.assert_close(per_sample, direct, rtol=1e-5, atol=1e-6)


def test_tokenizer_loss_gradients_reach_the_encoder():
    tok = _tokenizer().train()
    tokenizer_loss(tok, torch.randn(2, 8, 6)).loss.backward()
    # straight-through
    assert tok.embed.weight.grad is not None and tok.embed.weight.grad.abs().sum() > 0
    assert tok.post_quant_embed_pre.weight.grad.abs().sum() > 0  # coarse path trained


def test_predictor_loss_is_teacher_forced_cross_entropy():
    tok = _tokenizer()
    torch.manual_seed(1)
    model = Kronos(
        KronosConfig(s1_bits=4, s2_bits=4, n_layers=1, d_model=16, n_heads=2, ff_dim=32)
    ).eval()
    x, stamp = torch.randn(2, 9, 6), torch.randint(0, 7, (2, 9, 5)).float()
    out = predictor_loss(model, tok, x, stamp)
    with torch.no_grad():
        s1, s2 = tok.encode(x)
        l1, l2 = model(s1[:, :-1], s2[:, :-1], stamp[:, :-1], s1[:, 1:])
        nll = lambda logits, target: (  # noqa: E731
            -torch.log_softmax(logits, -1).gather(-1, target[..., None]).mean()
        )
        expected = (nll(l1, s1[:, 1:]) + nll(l2, s2[:, 1:])) / 2
    torch.testing.assert_close(out.loss.detach(), expected, rtol=1e-5, atol=1e-6)
    assert not any(p.requires_grad and p.grad is not None for p in tok.parameters())
