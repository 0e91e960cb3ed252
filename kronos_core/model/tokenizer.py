"""``KronosTokenizer``: turns normalized candles into (s1, s2) token pairs and back.

encode: embed -> causal encoder blocks -> quant_embed -> L2-normalize -> sign bits
-> two integers (least significant bit first). decode: bits -> ±1/sqrt(bits) ->
post_quant_embed -> causal decoder blocks -> head.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from kronos_core.model.bsq import QuantizerLoss, bsq_loss, quantize_ste
from kronos_core.model.checkpoint import PretrainedMixin
from kronos_core.model.config import TokenizerConfig
from kronos_core.model.layers import (
    KVCache,
    TransformerBlock,
    check_shared_rotary,
    padded_positions_and_mask,
    padding_bias,
    shared_history_attention,
    stack_angles,
)


class _BSQBuffers(nn.Module):
    """Holds the quantiser's integer buffers so checkpoints load; inference derives them."""

    def __init__(self, codebook_dim: int, group_size: int):
        super().__init__()
        self.register_buffer("basis", 2 ** torch.arange(codebook_dim, dtype=torch.int64))
        self.register_buffer("group_basis", 2 ** torch.arange(group_size, dtype=torch.int64))


class _QuantizerHolder(nn.Module):
    def __init__(self, codebook_dim: int, group_size: int):
        super().__init__()
        self.bsq = _BSQBuffers(codebook_dim, group_size)


@dataclass
class TokenizerTrainingOutput:
    # (B, L, d_in) reconstruction from the s1 bits alone (post_quant_embed_pre)
    coarse: torch.Tensor
    # (B, L, d_in) reconstruction from all bits (post_quant_embed), as ``decode``
    full: torch.Tensor
    # (B, L, s1_bits + s2_bits) quantised code ±1/sqrt(bits), straight-through gradient
    code: torch.Tensor
    quant: QuantizerLoss  # quantiser loss and its parts; ``quant.total`` is the term to add


def _run_stack(
    blocks: nn.ModuleList, z: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """z (B, L, d_model) through every block of a stack (none: z itself), the rotary factors
    computed once for all of them."""
    if len(blocks):
        rope = stack_angles(blocks, positions)  # (B, 1, L, D) each
        for block in blocks:
            z = block(z, rope, mask)
    return z


def _check_loaded_rotary(module: nn.Module, _keys: object) -> None:
    """Load post-hook: each stack of the tokenizer shares one rotary (``check_shared_rotary``)."""
    check_shared_rotary(cast(nn.ModuleList, module.encoder), "tokenizer encoder")
    check_shared_rotary(cast(nn.ModuleList, module.decoder), "tokenizer decoder")


class KronosTokenizer(PretrainedMixin, nn.Module):
    config_class = TokenizerConfig
    kind = "tokenizer"

    def __init__(self, config: TokenizerConfig):
        super().__init__()
        self.config = config
        c = config
        block = lambda: TransformerBlock(  # noqa: E731
            c.d_model, c.n_heads, c.ff_dim, c.ffn_dropout_p, c.attn_dropout_p, c.resid_dropout_p
        )
        self.embed = nn.Linear(c.d_in, c.d_model)
        # The published layout has one block fewer than the configured number.
        self.encoder = nn.ModuleList(block() for _ in range(c.n_enc_layers - 1))
        self.quant_embed = nn.Linear(c.d_model, c.codebook_dim)
        self.post_quant_embed_pre = nn.Linear(c.s1_bits, c.d_model)
        self.post_quant_embed = nn.Linear(c.codebook_dim, c.d_model)
        self.decoder = nn.ModuleList(block() for _ in range(c.n_dec_layers - 1))
        self.head = nn.Linear(c.d_model, c.d_in)
        self.tokenizer = _QuantizerHolder(c.codebook_dim, c.group_size)
        # each stack computes its rotary factors once for all its layers: hold loaded weights to it
        self.register_load_state_dict_post_hook(_check_loaded_rotary)

    @staticmethod
    def _layout(batch: int, length: int, pad: torch.Tensor | None,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        if pad is None:
            pad = torch.zeros(batch, dtype=torch.long, device=device)
        return padded_positions_and_mask(pad.to(device), length)

    def encode_latent(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d_in) normalized candles -> unit-norm latent z (B, L, s1_bits + s2_bits).

        pad (B,) optional number of left-padding rows per series.
        """
        positions, mask = self._layout(x.shape[0], x.shape[1], pad, x.device)
        z = _run_stack(self.encoder, self.embed(x), positions, mask)  # (B, L, d_model)
        z = self.quant_embed(z)  # (B, L, bits)
        return nn.functional.normalize(z, dim=-1)

    def encode(
        self, x: torch.Tensor, pad: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, L, d_in) -> (s1, s2) integer ids, each (B, L) int64."""
        bits = (self.encode_latent(x, pad) > 0).long()  # (B, L, bits)
        return self.bits_to_ids(bits)

    def bits_to_ids(self, bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """bits (..., s1_bits + s2_bits) of 0/1 -> (s1, s2), least significant bit first."""
        s1_bits = self.config.s1_bits
        weights = 2 ** torch.arange(max(s1_bits, self.config.s2_bits), device=bits.device)
        s1 = (bits[..., :s1_bits] * weights[:s1_bits]).sum(-1)
        s2 = (bits[..., s1_bits:] * weights[: self.config.s2_bits]).sum(-1)
        return s1, s2

    def ids_to_code(self, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        """(s1, s2) ids (...,) -> quantised code (..., s1_bits + s2_bits) with entries
        ±1/sqrt(bits)."""
        c = self.config

        def unpack(ids: torch.Tensor, n: int) -> torch.Tensor:
            powers = 2 ** torch.arange(n, device=ids.device)
            return ((ids.long()[..., None] & powers) != 0).float()  # (..., n)

        bits = torch.cat([unpack(s1, c.s1_bits), unpack(s2, c.s2_bits)], dim=-1)
        return (bits * 2 - 1) / math.sqrt(c.codebook_dim)

    def decode(
        self, s1: torch.Tensor, s2: torch.Tensor, pad: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(s1, s2) (B, L) -> reconstructed normalized candles (B, L, d_in)."""
        code = self.ids_to_code(s1, s2).to(self.post_quant_embed.weight.dtype)  # (B, L, bits)
        return self.decode_code(self.post_quant_embed(code), pad)

    def decode_after_shared_history(
        self,
        history: tuple[torch.Tensor, torch.Tensor],
        new: tuple[torch.Tensor, torch.Tensor],
        pad: torch.Tensor | None,
        paths: int,
    ) -> torch.Tensor:
        """``decode`` of windows whose first tokens are shared by runs of ``paths`` rows, for the
        last positions only: the causal decoder runs over each series' shared history once
        (keys and values kept per layer), then over each row's own last tokens, which attend
        to their series' history and causally to each other. The numbers are ``decode``'s on
        the whole windows (``cat(history repeated per path, new)``) at those positions, but for
        rounding (the products have other shapes).

        history: (s1, s2) ids (B, Lh) of each series' part of the window, left-padded by
        ``pad`` (B,) slots (None: no padding); new: (s1, s2) ids (B * paths, H), rows in runs of
        ``paths`` per series -> (B * paths, H, d_in) reconstructed normalized candles.
        """
        hist_s1, hist_s2 = history
        b, lh = hist_s1.shape
        n, h = new[0].shape
        if n != b * paths:
            raise ValueError(f"{n} rows of new tokens are not {b} series x {paths} paths")
        device, dtype = new[0].device, self.post_quant_embed.weight.dtype
        pad_b = torch.zeros(b, dtype=torch.long, device=device) if pad is None else pad.to(device)
        pad_n = pad_b.repeat_interleave(paths)  # (N,)
        new_slots = lh + torch.arange(h, device=device)  # (H,) the new tokens' window slots
        rope_new = stack_angles(self.decoder, new_slots[None, :] - pad_n[:, None])  # (N, 1, H, D)
        causal = torch.ones(h, h, dtype=torch.bool, device=device).tril()  # (H, H)
        z_new = self.post_quant_embed(self.ids_to_code(*new).to(dtype))  # (N, H, d)
        if not lh:  # nothing shared: the new tokens alone, causally
            for block in cast(Sequence[TransformerBlock], self.decoder):
                attn = block.self_attn
                q, k, v = attn.project(block.norm1(z_new), rope_new)  # (N, heads, H, D) each
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
                z_new = z_new + attn.finish(out)
                z_new = z_new + block.ffn(block.norm2(z_new))
            return self.head(z_new)  # (N, H, d_in)
        z_hist = self.post_quant_embed(self.ids_to_code(hist_s1, hist_s2).to(dtype))  # (B, Lh, d)
        positions, hist_mask = padded_positions_and_mask(pad_b, lh, pad is not None)
        rope_hist = stack_angles(self.decoder, positions)
        # (B, 1, 1, Lh): a new token sees its series' real history
        hist_bias = None if pad is None else padding_bias(
            torch.arange(lh, device=device)[None, :] >= pad_b[:, None], dtype  # (B, Lh) real
        )
        blocks = cast(Sequence[TransformerBlock], self.decoder)
        for i, block in enumerate(blocks):
            attn = block.self_attn
            q, k, v = attn.project(block.norm1(z_new), rope_new)  # (N, heads, H, D) each
            if i < len(blocks) - 1:
                cache = KVCache(b, attn.n_heads, lh, attn.head_dim, z_hist.dtype, device, lh)
                z_hist = block(z_hist, rope_hist, hist_mask, cache, 0)  # (B, Lh, d)
                hist_k, hist_v = cache.k, cache.v  # (B, heads, Lh, D) each
            else:  # the last block's history outputs go nowhere: its keys and values only
                _, hist_k, hist_v = attn.project(block.norm1(z_hist), rope_hist)
            # (N, heads, H, D): each series' history once, each row's new tokens causally
            out = shared_history_attention(q, hist_k, hist_v, hist_bias, k, v, causal, paths)
            z_new = z_new + attn.finish(out)
            z_new = z_new + block.ffn(block.norm2(z_new))
        return self.head(z_new)  # (N, H, d_in)

    def decode_code(self, z: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
        """z (B, L, d_model) after a post-quant projection -> (B, L, d_in)."""
        positions, mask = self._layout(z.shape[0], z.shape[1], pad, z.device)
        return self.head(_run_stack(self.decoder, z, positions, mask))

    def training_forward(
        self, x: torch.Tensor, pad: torch.Tensor | None = None
    ) -> TokenizerTrainingOutput:
        """Training pass: x (B, L, d_in) normalized candles -> both reconstructions and the
        quantiser loss.

        The code's bits are exactly ``encode``'s; gradients pass the quantiser
        straight through. The caller fits ``coarse`` and ``full`` to ``x`` with MSE
        and adds ``quant.total``. pad (B,) optional left-padding rows per series
        (padded rows are left out of the quantiser loss; mask them in the MSE too).
        """
        c = self.config
        z = self.encode_latent(x, pad)  # (B, L, bits), unit norm
        code = quantize_ste(z)  # (B, L, bits)
        real = None
        if pad is not None:
            # (B, L)
            real = torch.arange(x.shape[1], device=x.device)[None, :] >= pad.to(x.device)[:, None]
        quant = bsq_loss(z, code, c.beta, c.gamma0, c.gamma, c.zeta, c.group_size, real)
        # (B, L, d_in)
        coarse = self.decode_code(self.post_quant_embed_pre(code[..., : c.s1_bits]), pad)
        full = self.decode_code(self.post_quant_embed(code), pad)  # (B, L, d_in)
        return TokenizerTrainingOutput(coarse, full, code, quant)
