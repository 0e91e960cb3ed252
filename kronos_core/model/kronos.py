"""``Kronos``: the autoregressive predictor over (s1, s2) token pairs.

The model file holds modules only; the generation loop (prefill, cached decode,
sliding windows, sampling) lives in ``kronos_core.engine``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kronos_core.model.checkpoint import PretrainedMixin
from kronos_core.model.config import DEP_HEADS, KronosConfig
from kronos_core.model.layers import (
    AttentionProjections,
    KVCache,
    RMSNorm,
    TransformerBlock,
    apply_rotary,
)

# Rows of the five temporal tables, in the order of the time-feature columns.
TIME_TABLE_SIZES = {"minute": 60, "hour": 24, "weekday": 7, "day": 32, "month": 13}


class TokenEmbedding(nn.Module):
    """``fusion_proj(concat(emb_s1(s1)*sqrt(d), emb_s2(s2)*sqrt(d)))``."""

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.emb_s1 = nn.Embedding(2**s1_bits, d_model)
        self.emb_s2 = nn.Embedding(2**s2_bits, d_model)
        self.fusion_proj = nn.Linear(2 * d_model, d_model)

    def forward(self, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        both = torch.cat([self.emb_s1(s1) * scale, self.emb_s2(s2) * scale], dim=-1)  # (B, L, 2d)
        return self.fusion_proj(both)  # (B, L, d)


class FixedSinusoidTable(nn.Module):
    """A frozen sinusoid table (``emb.weight``), used when ``learn_te`` is false."""

    def __init__(self, rows: int, d_model: int):
        super().__init__()
        table = torch.zeros(rows, d_model)
        position = torch.arange(rows).float()[:, None]
        rate = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        table[:, 0::2] = torch.sin(position * rate)
        table[:, 1::2] = torch.cos(position * rate)
        self.emb = nn.Embedding(rows, d_model)
        self.emb.weight = nn.Parameter(table, requires_grad=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.emb(idx)


class TemporalEmbedding(nn.Module):
    """Sum of minute/hour/weekday/day/month table look-ups."""

    def __init__(self, d_model: int, learned: bool):
        super().__init__()
        make = (lambda n: nn.Embedding(n, d_model)) if learned else (lambda n: FixedSinusoidTable(n, d_model))
        self.minute_embed = make(TIME_TABLE_SIZES["minute"])
        self.hour_embed = make(TIME_TABLE_SIZES["hour"])
        self.weekday_embed = make(TIME_TABLE_SIZES["weekday"])
        self.day_embed = make(TIME_TABLE_SIZES["day"])
        self.month_embed = make(TIME_TABLE_SIZES["month"])

    def forward(self, stamp: torch.Tensor) -> torch.Tensor:
        """stamp (B, L, 5) [minute, hour, weekday, day, month] -> (B, L, d)."""
        idx = stamp.long()
        total = self.hour_embed(idx[..., 1]) + self.weekday_embed(idx[..., 2])
        total = total + self.day_embed(idx[..., 3]) + self.month_embed(idx[..., 4])
        return total + self.minute_embed(idx[..., 0])


class CrossAttention(AttentionProjections):
    """The s2 head's attention: 4 heads, no mask by default, no rotation at inference."""

    def __init__(self, d_model: int, n_heads: int = DEP_HEADS):
        super().__init__(d_model, n_heads)

    def project_kv(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, L, d) -> keys, values (B, 4, L, d/4), unrotated (position 0 for all)."""
        return self.heads(self.k_proj(hidden)), self.heads(self.v_proj(hidden))

    def attend(self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask=None) -> torch.Tensor:
        """query (B, Lq, d); k, v (B, 4, S, D); key_mask (B, S) bool or None -> (B, Lq, d)."""
        q = self.heads(self.q_proj(query))  # (B, 4, Lq, D)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, S)
        return self.merge(nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask))  # (B, Lq, d)


class DependencyLayer(nn.Module):
    """``norm(h + cross_attn(query=emb_s1(s1), keys/values=h))``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.cross_attn = CrossAttention(d_model)
        self.norm = RMSNorm(d_model)


class DualHead(nn.Module):
    def __init__(self, s1_bits: int, s2_bits: int, d_model: int):
        super().__init__()
        self.proj_s1 = nn.Linear(d_model, 2**s1_bits)
        self.proj_s2 = nn.Linear(d_model, 2**s2_bits)


class Kronos(PretrainedMixin, nn.Module):
    config_class = KronosConfig
    kind = "model"

    def __init__(self, config: KronosConfig):
        super().__init__()
        self.config = config
        c = config
        self.embedding = TokenEmbedding(c.s1_bits, c.s2_bits, c.d_model)
        self.time_emb = TemporalEmbedding(c.d_model, c.learn_te)
        self.token_drop = nn.Dropout(c.token_dropout_p)
        self.transformer = nn.ModuleList(
            TransformerBlock(c.d_model, c.n_heads, c.ff_dim, c.ffn_dropout_p, c.attn_dropout_p, c.resid_dropout_p)
            for _ in range(c.n_layers)
        )
        self.norm = RMSNorm(c.d_model)
        self.dep_layer = DependencyLayer(c.d_model)
        self.head = DualHead(c.s1_bits, c.s2_bits, c.d_model)

    # ---- pieces used by the engine -------------------------------------------------
    def embed(self, s1: torch.Tensor, s2: torch.Tensor, stamp: torch.Tensor) -> torch.Tensor:
        """(B, L) ids and (B, L, 5) time features -> (B, L, d) input embeddings."""
        return self.token_drop(self.embedding(s1, s2) + self.time_emb(stamp))

    def trunk(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        cache_start: int = 0,
    ) -> torch.Tensor:
        """Embeddings (B, L, d) -> final hidden states (B, L, d) after ``norm``."""
        for i, block in enumerate(self.transformer):
            x = block(x, positions, mask, None if caches is None else caches[i], cache_start)
        return self.norm(x)

    def s1_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head.proj_s1(hidden)

    def s2_logits(
        self,
        hidden_last: torch.Tensor,
        s1: torch.Tensor,
        dep_k: torch.Tensor,
        dep_v: torch.Tensor,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of s2 given the chosen s1.

        hidden_last (B, d): hidden state of the last position; s1 (B,) ids;
        dep_k, dep_v (B, 4, S, D) projections of the hidden states the head
        attends over; key_mask (B, S) True where a key is real.
        """
        query = self.embedding.emb_s1(s1)[:, None, :]  # (B, 1, d), not scaled by sqrt(d)
        attn = self.dep_layer.cross_attn.attend(query, dep_k, dep_v, key_mask)[:, 0]  # (B, d)
        return self.head.proj_s2(self.dep_layer.norm(hidden_last + attn))

    # ---- training-style forward (teacher forcing) ----------------------------------
    def forward(self, s1: torch.Tensor, s2: torch.Tensor, stamp: torch.Tensor, s1_target: torch.Tensor):
        """Teacher-forced logits for training: (B, L, 2^s1_bits), (B, L, 2^s2_bits).

        The s2 head's query at every position is ``emb_s1`` of the target s1,
        causal, with rotary positions 0..L-1.
        """
        b, length = s1.shape
        positions = torch.arange(length, device=s1.device).expand(b, length)
        hidden = self.trunk(self.embed(s1, s2, stamp), positions)  # (B, L, d)
        attn = self.dep_layer.cross_attn
        cos, sin = attn.rotary.cos_sin(positions)
        q = apply_rotary(attn.heads(attn.q_proj(self.embedding.emb_s1(s1_target))), cos, sin)
        k = apply_rotary(attn.heads(attn.k_proj(hidden)), cos, sin)
        v = attn.heads(attn.v_proj(hidden))
        dropout = self.config.attn_dropout_p if self.training else 0.0
        out = attn.merge(nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True))
        return self.s1_logits(hidden), self.head.proj_s2(self.dep_layer.norm(hidden + out))
