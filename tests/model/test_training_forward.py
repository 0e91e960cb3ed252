"""Teacher-forced training passes against the inference path they share their layers with."""

from __future__ import annotations

import numpy as np
import torch

from kronos_core.base.candles import time_features
from kronos_core.model.bsq import bsq_loss, quantize_ste
from kronos_core.model.layers import KVCache, padded_positions_and_mask


def _reference_window(parity):
    """The parity fixture's first case history: ids (1, L), stamps (1, L, 5), and the reference
    intermediates."""
    inter = parity.cases["intermediates"]
    case = parity.cases["cases"][inter["case"]]
    start, lookback = int(case["start_row"]), int(case["lookback"])
    stamps = time_features(parity.candles["timestamps"].iloc[start : start + lookback])  # (L, 5)
    s1 = torch.tensor([inter["s1_ids"]])  # (1, L)
    s2 = torch.tensor([inter["s2_ids"]])  # (1, L)
    return s1, s2, torch.from_numpy(np.asarray(stamps, dtype=np.float32))[None], inter


def _prefill_hidden(model, s1, s2, stamp):
    """What the engine's prefill computes: trunk through key/value caches, positions 0..L-1."""
    c, (b, length) = model.config, s1.shape
    caches = [
        KVCache(b, c.n_heads, length, c.head_dim, torch.float32, "cpu") for _ in range(c.n_layers)
    ]
    positions, mask = padded_positions_and_mask(torch.zeros(b, dtype=torch.long), length)
    return model.trunk(model.embed(s1, s2, stamp), positions, mask, caches, 0)  # (B, L, d)


def test_last_s1_logits_equal_engine_prefill_and_reference(parity):
    model = parity.model
    s1, s2, stamp, inter = _reference_window(parity)
    with torch.no_grad():
        s1_logits, s2_logits = model(s1, s2, stamp, s1)
        engine = model.s1_logits(_prefill_hidden(model, s1, s2, stamp)[:, -1])  # (1, V1)
    assert s1_logits.shape == (1, s1.shape[1], 1024) and s2_logits.shape == (1, s1.shape[1], 1024)
    torch.testing.assert_close(s1_logits[:, -1], engine, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        s1_logits[0, -1].numpy(), inter["last_s1_logits"], rtol=1e-4, atol=1e-5
    )


def test_s2_logits_equal_engine_at_position_zero(parity):
    """A length-1 window: position 0 makes the training head (rotary, causal) the inference head."""
    model = parity.model
    s1, s2, stamp, _ = _reference_window(parity)
    s1, s2, stamp = s1[:, 10:11], s2[:, 10:11], stamp[:, 10:11]
    target = torch.tensor([[77]])
    with torch.no_grad():
        _, s2_logits = model(s1, s2, stamp, target)
        hidden = _prefill_hidden(model, s1, s2, stamp)  # (1, 1, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)
        engine = model.s2_logits(hidden[:, -1], target[:, 0], k, v)  # (1, V2)
    torch.testing.assert_close(s2_logits[:, 0], engine, rtol=1e-5, atol=1e-5)


def test_forward_is_causal_and_padding_invariant(parity):
    model = parity.model
    s1, s2, stamp, _ = _reference_window(parity)
    s1, s2, stamp = s1[:, :20], s2[:, :20], stamp[:, :20]
    target = torch.roll(s1, -1, dims=1)
    with torch.no_grad():
        a1, a2 = model(s1, s2, stamp, target)
        changed = s1.clone()
        changed[0, 15], target2 = (changed[0, 15] + 1) % 1024, target.clone()
        target2[0, 15] = 5
        b1, b2 = model(changed, s2, stamp, target2)
        # the same row left-padded by 6 columns computes the same logits on its real columns
        pad = torch.tensor([6])
        p1, p2 = model(
            torch.cat([torch.zeros(1, 6, dtype=torch.long), s1], 1),
            torch.cat([torch.zeros(1, 6, dtype=torch.long), s2], 1),
            torch.cat([torch.zeros(1, 6, 5), stamp], 1),
            torch.cat([torch.zeros(1, 6, dtype=torch.long), target], 1),
            pad,
        )
    torch.testing.assert_close(a1[:, :15], b1[:, :15], rtol=0, atol=0)
    torch.testing.assert_close(a2[:, :15], b2[:, :15], rtol=0, atol=0)
    assert not torch.allclose(a1[:, 15:], b1[:, 15:]) and not torch.allclose(a2[:, 15:], b2[:, 15:])
    torch.testing.assert_close(p1[:, 6:], a1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p2[:, 6:], a2, rtol=1e-5, atol=1e-5)


def test_forward_trains(parity):
    """Gradients reach the trunk and the s2 head from the teacher-forced losses."""
    model = parity.model
    s1, s2, stamp, _ = _reference_window(parity)
    model.zero_grad()
    l1, l2 = model(s1[:, :-1], s2[:, :-1], stamp[:, :-1], s1[:, 1:])
    loss = torch.nn.functional.cross_entropy(l1.flatten(0, 1), s1[:, 1:].flatten())
    loss = loss + torch.nn.functional.cross_entropy(l2.flatten(0, 1), s2[:, 1:].flatten())
    loss.backward()
    assert model.transformer[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert model.dep_layer.cross_attn.q_proj.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_tokenizer_training_forward_matches_inference(parity):
    tok = parity.tokenizer
    # (1, L, 6)
    x = torch.tensor([parity.cases["intermediates"]["normalized_input"]], dtype=torch.float32)
    with torch.no_grad():
        out = tok.training_forward(x)
        s1, s2 = tok.encode(x)
        decoded = tok.decode(s1, s2)
    # same bits as encode
    torch.testing.assert_close(out.code, tok.ids_to_code(s1, s2), rtol=0, atol=0)
    torch.testing.assert_close(out.full, decoded, rtol=1e-5, atol=1e-6)
    assert out.coarse.shape == x.shape and not torch.allclose(out.coarse, out.full)
    assert torch.isfinite(out.quant.total)
    assert (
        out.quant.commitment > 0 and out.quant.sample_entropy > 0 and out.quant.codebook_entropy > 0
    )


def test_tokenizer_gradients_pass_the_quantizer(parity):
    tok = parity.tokenizer
    x = torch.tensor([parity.cases["intermediates"]["normalized_input"]], dtype=torch.float32)
    tok.zero_grad()
    out = tok.training_forward(x)
    loss = ((out.full - x) ** 2).mean() + ((out.coarse - x) ** 2).mean() + out.quant.total
    loss.backward()
    assert tok.embed.weight.grad.abs().sum() > 0  # through the straight-through estimator
    assert tok.post_quant_embed_pre.weight.grad.abs().sum() > 0
    tok.zero_grad()


def test_bsq_loss_parts():
    """A latent on a corner has zero commitment and near-zero per-sample entropy (the soft
    assignment is sharp: inverse temperature 100); spread codes raise the codebook entropy to its
    maximum, group_size bits per group."""
    torch.manual_seed(0)
    dim, g = 8, 4
    corners = torch.where(torch.rand(4096, dim) > 0.5, 1.0, -1.0) / dim**0.5  # (T, D) on the sphere
    loss = bsq_loss(corners, quantize_ste(corners), 0.05, 1.0, 1.1, 0.05, g)
    assert float(loss.commitment) < 1e-10
    assert float(loss.sample_entropy) < 1e-3  # at inverse temperature 1: ~5 nats
    uniform_max = (dim // g) * np.log(2**g)
    assert abs(float(loss.codebook_entropy) - uniform_max) < 0.05
    off = torch.nn.functional.normalize(corners + 0.3 * torch.randn_like(corners), dim=-1)
    assert float(bsq_loss(off, quantize_ste(off), 0.05, 1.0, 1.1, 0.05, g).commitment) > 0
    weight = torch.zeros(4096)
    weight[:10] = 1
    few = bsq_loss(corners, quantize_ste(corners), 0.05, 1.0, 1.1, 0.05, g, weight)
    assert float(few.codebook_entropy) < float(loss.codebook_entropy)


def test_fused_projections_give_what_the_layers_give_and_follow_weight_updates(tiny):
    """On a CPU with no gradient, q/k/v (and the feed-forward gate and value) run as one product
    over concatenated weights (``FusedLinears``); it gives the layers' own outputs (q and k in
    ``pair_order``), and an in-place update of a weight is seen at the next call."""
    from kronos_core.model.layers import fuse_on_cpu, pair_order

    model = tiny[0]
    block = model.transformer[0]
    attn = block.self_attn
    x = torch.randn(3, 7, model.config.d_model)
    rope = attn.rotary.angles(torch.arange(7).repeat(3, 1))
    with torch.no_grad():
        assert fuse_on_cpu(x)
        fused = attn.project(x, rope) + (block.ffn(x),)
    with torch.enable_grad():
        assert not fuse_on_cpu(x)
        apart = tuple(t.detach() for t in attn.project(x, rope) + (block.ffn(x),))
    order = pair_order(attn.n_heads, attn.head_dim).view(attn.n_heads, -1)[0]
    apart = (apart[0][..., order], apart[1][..., order]) + apart[2:]
    for a, b in zip(fused, apart):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        before = attn.project(x, rope)[2].clone()
        attn.v_proj.weight.mul_(2.0)  # an in-place update: the fused copy is remade
        after = attn.project(x, rope)[2]
        attn.v_proj.weight.div_(2.0)
    bias = attn.v_proj.bias.view(1, attn.n_heads, 1, attn.head_dim)  # v = W x + b, per head
    torch.testing.assert_close(after, before * 2.0 - bias, rtol=1e-5, atol=1e-5)
