"""``Kronos``: the autoregressive predictor over (s1, s2) token pairs.

The model file holds modules only; the generation loop (prefill, cached decode,
sliding windows, sampling) lives in ``kronos_core.engine``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from kronos_core.model.checkpoint import PretrainedMixin
from kronos_core.model.config import DEP_HEADS, KronosConfig
from kronos_core.model.layers import (
    AttentionProjections,
    DecodeCache,
    DerivedWeights,
    FusedLinears,
    RMSNorm,
    SharedHistoryKV,
    TransformerBlock,
    apply_rotary,
    check_shared_rotary,
    fuse_on_cpu,
    padded_positions_and_mask,
    stack_angles,
)

# the s2 head's keys of a group of rows: a tensor (n, 4, S, D), or a cache of shared histories
HeadKeys = torch.Tensor | SharedHistoryKV

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
        make = (
            (lambda n: nn.Embedding(n, d_model))
            if learned
            else (lambda n: FixedSinusoidTable(n, d_model))
        )
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
    """The s2 head's attention: 4 heads.

    At inference: no mask and no rotation (every query and key at position 0).
    In teacher-forced training: rotary positions 0..L-1 on queries and keys, causal.
    """

    def __init__(self, d_model: int, n_heads: int = DEP_HEADS, attn_dropout: float = 0.0):
        super().__init__(d_model, n_heads)
        self._kv = FusedLinears(self.k_proj, self.v_proj)
        self.attn_dropout = attn_dropout  # training only

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """x (B, 4, L, D); positions (B, L) or None (position 0: the identity)."""
        return x if positions is None else apply_rotary(x, self.rotary.angles(positions))

    def project_kv(
        self, hidden: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, L, d) -> keys, values (B, 4, L, d/4); keys rotated when positions (B, L) are
        given."""
        if positions is None and fuse_on_cpu(hidden):
            b, length, _ = hidden.shape
            # (2, B, 4, L, D): a view of the one product (B, L, 2 * d)
            kv = self._kv(hidden).view(b, length, 2, self.n_heads, self.head_dim)
            kv = kv.permute(2, 0, 3, 1, 4)
            return kv[0], kv[1]
        k = self._rotate(self.heads(self.k_proj(hidden)), positions)  # (B, 4, L, D)
        return k, self.heads(self.v_proj(hidden))  # (B, 4, L, D) each

    def attend(
        self,
        query: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        """query (B, Lq, d); k, v (B, 4, S, D) -> (B, Lq, d).

        key_mask (B, S) True where a key is real; or a full boolean ``attn_mask``
        (B, 1, Lq, S); ``causal`` adds the plain causal mask (Lq == S, no attn_mask);
        positions (B, Lq) rotate the queries (training), None leaves them at 0.
        """
        q = self._rotate(self.heads(self.q_proj(query)), positions)  # (B, 4, Lq, D)
        if key_mask is not None:
            attn_mask = key_mask[:, None, None, :]  # (B, 1, 1, S)
        dropout = self.attn_dropout if self.training else 0.0
        out = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=causal and attn_mask is None
        )  # (B, 4, Lq, D)
        return self.merge(out)  # (B, Lq, d)


class DependencyLayer(nn.Module):
    """``norm(h + cross_attn(query=emb_s1(s1), keys/values=h))``."""

    def __init__(self, d_model: int, attn_dropout: float = 0.0):
        super().__init__()
        self.cross_attn = CrossAttention(d_model, DEP_HEADS, attn_dropout)
        self.norm = RMSNorm(d_model)

    def forward(self, hidden: torch.Tensor, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                **attend_kwargs: Any) -> torch.Tensor:
        """hidden, query (B, Lq, d); k, v (B, 4, S, D); kwargs as ``CrossAttention.attend`` -> (B,
        Lq, d)."""
        return self.norm(hidden + self.cross_attn.attend(query, k, v, **attend_kwargs))


class DualHead(nn.Module):
    def __init__(self, s1_bits: int, s2_bits: int, d_model: int):
        super().__init__()
        self.proj_s1 = nn.Linear(d_model, 2**s1_bits)
        self.proj_s2 = nn.Linear(d_model, 2**s2_bits)


def _check_loaded_rotary(module: nn.Module, _keys: object) -> None:
    """Load post-hook: the trunk's layers share one rotary (``check_shared_rotary``)."""
    check_shared_rotary(cast(nn.ModuleList, module.transformer), "Kronos trunk")


class FusedInputEmbedding:
    """A CPU inference's ``Kronos.embed`` as one summed table look-up (``embedding_bag``): each
    position's row of ``emb_s1 * sqrt(d) @ fusion_proj``'s first half, of its second half for
    s2, of each of the five time tables and the projection's bias. The numbers are ``embed``'s
    but for rounding (the projection's sum is split in two); 14 ops over the positions become
    one (2.5 against 0.18 ms for 8 x 251 positions on one thread). The table is
    ``DerivedWeights`` of the embeddings."""

    TIME_COLUMNS = (1, 2, 3, 4, 0)  # hour, weekday, day, month, minute: TemporalEmbedding's order

    def __init__(self, tokens: TokenEmbedding, times: TemporalEmbedding):
        self.tokens, self.times = tokens, times
        # table (rows, d), each part's first row (8,), the time columns in the parts' order (5,)
        self._table = DerivedWeights(self._params, self._make)

    @staticmethod
    def rows(config: KronosConfig) -> int:
        """The table's rows: each vocabulary's tokens, the time tables' rows and the bias."""
        return 2**config.s1_bits + 2**config.s2_bits + sum(TIME_TABLE_SIZES.values()) + 1

    def _time_tables(self) -> list[torch.Tensor]:
        t = self.times
        mods = (t.hour_embed, t.weekday_embed, t.day_embed, t.month_embed, t.minute_embed)
        return [cast(nn.Embedding, getattr(m, "emb", m)).weight for m in mods]

    def _params(self) -> list[torch.Tensor]:
        e = self.tokens
        return [e.emb_s1.weight, e.emb_s2.weight, e.fusion_proj.weight, e.fusion_proj.bias,
                *self._time_tables()]

    def _make(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e, d = self.tokens, self.tokens.d_model
        scale = math.sqrt(d)
        weight = e.fusion_proj.weight  # (d, 2d)
        parts = [
            (e.emb_s1.weight * scale) @ weight[:, :d].T,  # (V1, d)
            (e.emb_s2.weight * scale) @ weight[:, d:].T,  # (V2, d)
            *self._time_tables(),
            e.fusion_proj.bias[None, :],  # (1, d)
        ]
        table = torch.cat(parts)  # (rows, d)
        # made by device ops, no tensor from host data: made inside a step on first use, where
        # the engine's host-sync count would see it (tests/engine/test_host_syncs.py)
        sizes = [torch.full((1,), p.shape[0], device=table.device) for p in parts[:-1]]
        starts = torch.cat([torch.zeros(1, dtype=torch.long, device=table.device), *sizes])
        columns = torch.arange(5, device=table.device).roll(-1)  # TIME_COLUMNS
        return table, starts.cumsum(0), columns

    def __call__(self, s1: torch.Tensor, s2: torch.Tensor, stamp: torch.Tensor) -> torch.Tensor:
        """(B, L) ids and (B, L, 5) time features -> (B, L, d)."""
        table, starts, columns = self._table.get()
        b, length = s1.shape
        # (B, L, 8): each position's rows, the bias's (index 0 of its part) last
        idx = torch.cat([
            s1[..., None], s2[..., None], stamp.long().index_select(-1, columns),
            torch.zeros_like(s1)[..., None],
        ], dim=-1) + starts
        out = nn.functional.embedding_bag(idx.view(b * length, -1), table, mode="sum")
        return out.view(b, length, -1)  # (B, L, d)


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
            TransformerBlock(
                c.d_model, c.n_heads, c.ff_dim, c.ffn_dropout_p, c.attn_dropout_p, c.resid_dropout_p
            )
            for _ in range(c.n_layers)
        )
        self.norm = RMSNorm(c.d_model)
        self.dep_layer = DependencyLayer(c.d_model, c.attn_dropout_p)
        self.head = DualHead(c.s1_bits, c.s2_bits, c.d_model)
        # the trunk computes its rotary factors once for all layers: hold loaded weights to that
        self.register_load_state_dict_post_hook(_check_loaded_rotary)
        self._fused_embed = FusedInputEmbedding(self.embedding, self.time_emb)

    # ---- pieces used by the engine -------------------------------------------------
    def embed(self, s1: torch.Tensor, s2: torch.Tensor, stamp: torch.Tensor) -> torch.Tensor:
        """(B, L) ids and (B, L, 5) time features -> (B, L, d) input embeddings (a CPU's
        inference: one table look-up, ``FusedInputEmbedding``)."""
        if fuse_on_cpu(stamp) and not self.training and not torch.is_autocast_enabled("cpu"):
            return self._fused_embed(s1, s2, stamp)
        return self.token_drop(self.embedding(s1, s2) + self.time_emb(stamp))

    def trunk(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
        caches: Sequence[DecodeCache] | None = None,
        cache_start: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """Embeddings (B, L, d) -> final hidden states (B, L, d) after ``norm``."""
        rope = stack_angles(self.transformer, positions)  # (B, 1, L, D) each, for every layer
        for i, block in enumerate(self.transformer):
            x = block(x, rope, mask, None if caches is None else caches[i], cache_start)
        return self.norm(x)

    def s1_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head.proj_s1(hidden)

    def s2_logits(
        self,
        hidden_last: torch.Tensor,
        s1: torch.Tensor,
        dep_k: torch.Tensor | SharedHistoryKV,
        dep_v: torch.Tensor | None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of s2 given the chosen s1.

        hidden_last (B, d): hidden state of the last position; s1 (B,) ids;
        dep_k, dep_v (B, 4, S, D) projections of the hidden states the head
        attends over; key_mask (B, S) True where a key is real.
        """
        return self.s2_logits_of_groups(hidden_last, s1, [(0, len(s1), dep_k, dep_v, key_mask)])

    def s2_logits_of_groups(
        self,
        hidden_last: torch.Tensor,
        s1: torch.Tensor,
        groups: Sequence[tuple[int, int, HeadKeys, torch.Tensor | None, torch.Tensor | None]],
    ) -> torch.Tensor:
        """``s2_logits`` for rows of several groups at once, each group over its own keys (what
        ``s2_logits`` computes for one group: the dependency layer at inference, no rotation, no
        causal mask).

        hidden_last (N, d) and s1 (N,) of every group's rows in order; groups: (start, end,
        dep_k, dep_v, key_mask) per group, rows start:end of the batch, keys/values (n, 4, S, D)
        with the group's own S, key_mask (n, S) or None. The projections and norms run once over
        all rows, the attention once per group: each row gets what ``s2_logits`` gives it in its
        own group (``tests/engine/test_shared_step.py``). A group's keys may instead be a
        ``SharedHistoryKV`` (values None), which knows what each row sees.
        """
        attn = self.dep_layer.cross_attn
        query = self.embedding.emb_s1(s1)[:, None, :]  # (N, 1, d), not scaled by sqrt(d)
        q = attn.heads(attn.q_proj(query))  # (N, 4, 1, D), no rotation (position 0)
        outs = []
        for a, b, k, v, mask in groups:
            if isinstance(k, SharedHistoryKV):
                outs.append(k.attend(q[a:b]))  # (n, 4, 1, D)
                continue
            if v is None:
                raise ValueError("a group's keys as a tensor need their values")
            outs.append(nn.functional.scaled_dot_product_attention(
                q[a:b], k, v, attn_mask=None if mask is None else mask[:, None, None, :]
            ))  # (n, 4, 1, D)
        out = outs[0] if len(outs) == 1 else torch.cat(outs)  # (N, 4, 1, D)
        fused = self.dep_layer.norm(hidden_last[:, None, :] + attn.merge(out))  # (N, 1, d)
        return self.head.proj_s2(fused[:, 0])  # (N, V2)

    # ---- training forward (teacher forcing) ---------------------------------------
    def forward(
        self,
        s1: torch.Tensor,
        s2: torch.Tensor,
        stamp: torch.Tensor,
        s1_target: torch.Tensor,
        pad: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits for training over the same layers the engine runs.

        s1, s2 (B, L) input ids; stamp (B, L, 5) time features; s1_target (B, L)
        the next position's s1 (the s2 head's query at every position); pad (B,)
        optional left-padding rows per series (as ``EngineBatch.pad``): a padded
        row computes what it would alone, its padding positions are garbage.
        Positions are 0..L-1 from each row's first real token, causal, in the
        trunk and (rotary on queries and keys) in the s2 head.

        Returns s1_logits (B, L, 2^s1_bits) and s2_logits (B, L, 2^s2_bits).
        At position 0 the s2 head is the engine's; later positions differ by
        design (inference has no rotation and no causal mask).
        """
        b, length = s1.shape
        pad = (
            torch.zeros(b, dtype=torch.long, device=s1.device) if pad is None else pad.to(s1.device)
        )
        positions, mask = padded_positions_and_mask(pad, length)  # (B, L), (B, 1, L, L) or None
        hidden = self.trunk(self.embed(s1, s2, stamp), positions, mask)  # (B, L, d)
        k, v = self.dep_layer.cross_attn.project_kv(hidden, positions)  # (B, 4, L, D) each
        query = self.embedding.emb_s1(s1_target)  # (B, L, d), not scaled by sqrt(d)
        # (B, L, d)
        fused = self.dep_layer(
            hidden, query, k, v, positions=positions, attn_mask=mask, causal=True
        )
        return self.s1_logits(hidden), self.head.proj_s2(fused)
