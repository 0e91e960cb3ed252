"""One decode step for the cached rows of several jobs at once (continuous batching).

Jobs that a scheduler interleaves on one device (``kronos_core.engine.job.Generation``) each
hold their own key/value caches, with their own width, capacity and newest slot. Their rows
can still share a decode step: everything that acts on one token at a time (the embeddings,
the attention projections, ``out_proj``, the feed-forward layers, the norms and the s2 head's
key/value projection) runs once over the rows of every job, and only the attention itself
runs per job, each job's rows over that job's cache. A small job's rows then cost a big job's
step the marginal price of a few more rows, and no cache is ever copied to merge jobs or
split them again.

Each row computes what it computes in its own job's step (``kronos_core.engine.job.
decode_step``): the same operations, with its own positions, slot and key mask. The only
difference is the batch size of the matrix products, which does not change a seeded path
(``tests/engine/test_shared_step.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from kronos_core.model.kronos import Kronos
from kronos_core.model.layers import DecodeCache, TransformerBlock, stack_angles


def held_slots(
    real: torch.Tensor, slots: torch.Tensor, slot: torch.Tensor, max_context: int, rolling: bool
) -> torch.Tensor:
    """(n, C) the cache slots each row holds once the new token is written at ``slot``: real
    slots up to it, and in rolling mode only the last ``max_context`` of them."""
    mask = real & (slots[None, :] <= slot)
    if rolling:  # the window keeps the last max_context slots (a no-op before it slides)
        mask = mask & (slots[None, :] > slot - max_context)
    return mask


@dataclass
class DecodeMember:
    """One job's part of a shared decode step: its cached rows' newest tokens and its caches
    (the arguments of ``decode_step``)."""

    s1: torch.Tensor  # (n, 1) int64 newest s1 tokens
    s2: torch.Tensor  # (n, 1) int64
    stamp: torch.Tensor  # (n, 1, 5) their time features
    slot: torch.Tensor  # 0-d int64: the job's new cache slot
    pad: torch.Tensor  # (n,) padding slots of each row
    real: torch.Tensor  # (n, C) slots at or after each row's first real token
    slots: torch.Tensor  # (C,) arange(C)
    caches: Sequence[DecodeCache]  # one per trunk layer, (n, heads, C, D) as addressed
    dep: DecodeCache  # the s2 head's keys/values, (n, 4, C, D') as addressed
    max_context: int
    rolling: bool  # rolling mode past max_context: keys older than max_context are masked

    @property
    def rows(self) -> int:
        return self.s1.shape[0]

    def key_mask(self) -> torch.Tensor:
        """(n, C) the slots each row holds after this step's token is written."""
        return held_slots(self.real, self.slots, self.slot, self.max_context, self.rolling)


def shared_decode_step(
    model: Kronos, members: list[DecodeMember]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One new token for every cached row of ``members`` -> per member, in order: hidden
    (n, 1, d) and the s2 head's key mask (n, C), as ``decode_step`` returns them. Writes each
    member's keys/values at its slot."""
    if not members:
        return []
    bounds = [0]
    for m in members:
        bounds.append(bounds[-1] + m.rows)
    spans = list(zip(bounds, bounds[1:]))
    key_masks = [m.key_mask() for m in members]  # (n, C) each
    attn_masks = [mask[:, None, None, :] for mask in key_masks]  # (n, 1, 1, C) each
    positions = torch.cat([(m.slot - m.pad)[:, None] for m in members])  # (N, 1)
    x = model.embed(
        torch.cat([m.s1 for m in members]),
        torch.cat([m.s2 for m in members]),
        torch.cat([m.stamp for m in members]),
    )  # (N, 1, d)
    blocks = cast(list[TransformerBlock], list(model.transformer))
    rope = stack_angles(blocks, positions)  # (N, 1, 1, D) each, for every layer
    for layer, block in enumerate(blocks):
        attn = block.self_attn
        q, k, v = attn.project(block.norm1(x), rope)  # (N, H, 1, D) each
        out = torch.cat([
            attn.attend_at_slot(
                q[a:b], k[a:b], v[a:b], m.caches[layer], m.slot, mask
            )  # (n, H, 1, D)
            for m, (a, b), mask in zip(members, spans, attn_masks)
        ])  # (N, H, 1, D)
        x = x + attn.finish(out)
        x = x + block.ffn(block.norm2(x))
    hidden = model.norm(x)  # (N, 1, d)
    k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (N, 4, 1, D')
    for m, (a, b) in zip(members, spans):
        m.dep.write_at(m.slot, k[a:b], v[a:b])
    return [(hidden[a:b], mask) for (a, b), mask in zip(spans, key_masks)]


__all__ = ["DecodeMember", "held_slots", "shared_decode_step"]
