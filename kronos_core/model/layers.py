"""Building blocks shared by the tokenizer and the predictor.

Attention takes explicit per-row positions and an optional boolean mask so that
left-padded (ragged) batches and key/value caches compute exactly what each
series would compute alone. Parameter and buffer names follow the published
checkpoints (``q_proj``, ``rotary.inv_freq``, ``w1``...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, NamedTuple, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from kronos_core.model import native_attention

RMS_EPS = 1e-5
T = TypeVar("T")


def fuse_on_cpu(x: torch.Tensor) -> bool:
    """Whether projections of ``x`` that share an input run as one matrix product over their
    concatenated weights (``FusedLinears``): on a CPU and with no gradient to track. There each
    product of a small model costs mostly its call (~20 us), and the concatenated copy of the
    weights costs host memory only; on a GPU the copy would take device memory, and the calls
    are cheap or replayed in a CUDA graph."""
    return x.device.type == "cpu" and not torch.is_grad_enabled()


class DerivedWeights(Generic[T]):
    """Tensors computed from some parameters (``make()``), made on first use and remade when one
    of them changes: a new tensor (``.to``, a load) or an in-place update (its version counter
    moves). Replaced whole, so that step loops on threads of one process never see one part of
    a result made from another version's weights."""

    def __init__(self, params: Callable[[], Sequence[torch.Tensor]], make: Callable[[], T]):
        self._params, self._make = params, make
        self._made: tuple[tuple[tuple[int, int], ...], T] | None = None

    def get(self) -> T:
        key = tuple((p.data_ptr(), p._version) for p in self._params())
        made = self._made
        if made is None or made[0] != key:
            made = self._made = (key, self._make())
        return made[1]


class FusedLinears:
    """The weights and biases of several ``nn.Linear`` of one input, concatenated along their
    outputs: one product gives every output, each the same numbers its own layer gives (each
    output column is its own dot product); ``DerivedWeights`` of the layers. ``orders``: per
    layer, None or the order its outputs take in the product (an index over them)."""

    def __init__(self, *linears: nn.Linear,
                 orders: Sequence[torch.Tensor | None] | None = None):
        self.linears = linears
        self.orders = list(orders) if orders is not None else [None] * len(linears)
        self._fused = DerivedWeights(self._params, self._concatenated)

    def _params(self) -> list[torch.Tensor]:
        return [p for lin in self.linears for p in (lin.weight, lin.bias) if p is not None]

    def _concatenated(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        def ordered(t: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
            return t if order is None else t[order.to(t.device)]

        # (sum out, d_in)
        weight = torch.cat([ordered(lin.weight, o) for lin, o in zip(self.linears, self.orders)])
        if self.linears[0].bias is None:
            return weight, None
        bias = torch.cat([ordered(cast(torch.Tensor, lin.bias), o)
                          for lin, o in zip(self.linears, self.orders)])
        return weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d_in) -> (..., sum of the layers' outputs)."""
        weight, bias = self._fused.get()
        return F.linear(x, weight, bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = RMS_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.full((dim,), 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # torch's fused kernel: the same numbers as below in float32 (bit for bit on a CPU,
            # tests/model/test_layers.py), a tenth of the time over a prefill's rows
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)``, no biases."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float = 0.0):
        super().__init__()
        up = (d_model, ff_dim)
        self.w1, self.w3 = nn.Linear(*up, bias=False), nn.Linear(*up, bias=False)  # gate, value
        self.w2 = nn.Linear(ff_dim, d_model, bias=False)  # back down
        self.dropout = nn.Dropout(dropout)
        self._gate_value = FusedLinears(self.w1, self.w3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fuse_on_cpu(x):
            gate, value = self._gate_value(x).chunk(2, dim=-1)  # (..., ff_dim) each
        else:
            gate, value = self.w1(x), self.w3(x)
        return self.dropout(self.w2(F.silu(gate) * value))


class RotaryAngles(NamedTuple):
    """Rotary factors of a batch of positions, (B, 1, L, D) each: ``cos`` and ``sin_signed``, the
    sine with its first half negated (so that ``apply_rotary`` needs one roll, not a split, a
    negation and a concatenation); and ``turns`` (B, L, 1, D/2) complex, ``cos + i sin`` of each
    pair's angle (``rotate_pairs``). Made once per forward and shared by every layer of a stack
    (``Rotary.angles``)."""

    cos: torch.Tensor
    sin_signed: torch.Tensor
    turns: torch.Tensor


class Rotary(nn.Module):
    """Rotary position embedding; only holds ``inv_freq`` (head_dim / 2,)."""

    inv_freq: torch.Tensor  # a buffer: registered in __init__, declared here for the type checker

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        exponents = torch.arange(0, head_dim, 2).float() / head_dim  # (head_dim / 2,)
        self.register_buffer(name="inv_freq", tensor=1.0 / (base**exponents))

    def angles(self, positions: torch.Tensor) -> RotaryAngles:
        """positions (B, L) integer -> the rotary factors, (B, 1, L, head_dim) each."""
        half = self.inv_freq.shape[0]
        angles = positions.float()[..., None] * self.inv_freq  # (B, L, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (B, L, D)
        sin, cos = angles.sin(), angles.cos()
        sin_signed = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)  # (B, L, D)
        turns = torch.complex(cos[..., None, :half], sin[..., None, :half])  # (B, L, 1, D/2)
        return RotaryAngles(cos[:, None], sin_signed[:, None], turns)  # (B, 1, L, D) each


def stack_angles(blocks: Iterable[nn.Module], positions: torch.Tensor) -> RotaryAngles:
    """The rotary factors every attention layer of ``blocks`` applies at ``positions``: one
    computation for the whole stack, since each layer's ``inv_freq`` is the same function of the
    head size (``check_shared_rotary`` holds a loaded checkpoint to that)."""
    first = next(iter(blocks))
    return cast(TransformerBlock, first).self_attn.rotary.angles(positions)


def check_shared_rotary(blocks: Iterable[nn.Module], where: str) -> None:
    """Raise ``ValueError`` unless every block of a stack holds the same rotary ``inv_freq``
    (what ``stack_angles`` relies on; a published checkpoint always does)."""
    freqs = [cast(TransformerBlock, b).self_attn.rotary.inv_freq for b in blocks]
    if any(not torch.equal(freqs[0], f) for f in freqs[1:]):
        raise ValueError(
            f"{where}: the layers hold different rotary frequencies (rotary.inv_freq); this "
            "implementation computes the rotary factors once for all layers"
        )


def apply_rotary(x: torch.Tensor, rope: RotaryAngles) -> torch.Tensor:
    """x (..., L, D) with rope broadcasting to it -> ``x*cos + rotate_half(x)*sin``, where
    ``rotate_half(x) = cat(-x2, x1)``: computed as ``x*cos + cat(x2, x1) * sin_signed``, the same
    numbers (a negation is exact)."""
    cos, sin_signed = rope.cos, rope.sin_signed
    if cos.dtype != x.dtype:
        cos, sin_signed = cos.to(x.dtype), sin_signed.to(x.dtype)
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


def pair_order(n_heads: int, head_dim: int) -> torch.Tensor:
    """(n_heads * head_dim,) an order of a q or k projection's outputs in which each head's
    dims j and j + D/2 (the two a rotary angle turns together) sit side by side, at 2j and
    2j + 1: the layout ``rotate_pairs`` rotates. A head's q.k is then the same products
    summed in another order (equal but for rounding)."""
    half = head_dim // 2
    within = torch.stack((torch.arange(half), torch.arange(half) + half), -1).reshape(-1)  # (D,)
    return (torch.arange(n_heads)[:, None] * head_dim + within).reshape(-1)


def rotate_pairs(qk: torch.Tensor, rope: RotaryAngles) -> torch.Tensor:
    """qk (B, L, 2, H, D), q and k of each position side by side in ``pair_order`` (a view of
    the fused q/k/v product) -> (2, B, H, L, D) rotated q and k, each contiguous (the layout
    the attention kernels and caches read), in the same order: the numbers of ``apply_rotary``
    on the usual order (``x1*c - x2*s``, ``x2*c + x1*s``). In float32 one complex product by
    ``rope.turns`` (the pair (x1, x2) as x1 + i x2) over every head at once; other dtypes by
    products of the strided halves."""
    b, length, _, heads, head_dim = qk.shape
    half = head_dim // 2
    out = torch.empty(2, b, heads, length, head_dim, dtype=qk.dtype, device=qk.device)
    if qk.dtype == torch.float32:
        pairs = torch.view_as_complex(qk.reshape(b, length, 2, heads, half, 2))
        into = torch.view_as_complex(out.view(2, b, heads, length, half, 2))  # (2, B, H, L, D/2)
        # (B, L, 2, H, D/2) x (B, L, 1, 1, D/2), written through a permuted view of ``out``
        torch.mul(pairs, rope.turns[:, :, None], out=into.permute(1, 3, 0, 2, 4))
        return out
    c = rope.cos[:, 0, :, None, None, :half].to(qk.dtype)  # (B, L, 1, 1, D/2)
    s = -rope.sin_signed[:, 0, :, None, None, :half].to(qk.dtype)  # (B, L, 1, 1, D/2)
    x1, x2 = qk[..., 0::2], qk[..., 1::2]
    mine = out.permute(1, 3, 0, 2, 4)  # (B, L, 2, H, D) view
    o1, o2 = mine[..., 0::2], mine[..., 1::2]
    torch.mul(x1, c, out=o1)
    o1.sub_(x2 * s)
    torch.mul(x2, c, out=o2)
    o2.add_(x1 * s)
    return out


class KVCache:
    """Preallocated keys/values of one attention layer: (B, H, capacity, D) each.

    Slots are addressed by an index shared by all rows (batches are left-padded
    so every row's newest token sits in the same slot).
    """

    def __init__(self, batch: int, heads: int, capacity: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str, written: int = 0):
        """``written``: slots [0, written) the caller fills at once (``write`` from 0, or
        ``write_spread``), so they are left unset; the others start at zero, since attention
        reads every slot of a cache (masked slots must hold finite numbers)."""
        shape = (batch, heads, capacity, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.k[:, :, written:].zero_()
        self.v[:, :, written:].zero_()

    def write(self, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v (B, H, L, D) go to slots [start, start + L)."""
        end = start + k.shape[2]
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v

    def write_spread(self, k: torch.Tensor, v: torch.Tensor, paths: int) -> None:
        """k, v (B, H, L, D) go to slots [0, L) of each of the ``paths`` consecutive rows of their
        series (this cache's B * paths rows): one copy, no repeated temporary."""
        length = k.shape[2]
        for mine, its in ((self.k, k), (self.v, v)):
            # (B, paths, H, L, D) view of the rows' first L slots, filled from (B, 1, H, L, D)
            mine[:, :, :length].unflatten(0, (-1, paths)).copy_(its[:, None])

    def write_at(self, slot: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v (B, H, 1, D) go to slot ``slot`` (a 0-d int64 tensor on the cache's device).

        The slot stays on the device, so a decode step that writes here has the same
        shapes and no host read at every step (what a CUDA graph needs).
        """
        index = slot.reshape(1)  # (1,)
        self.k.index_copy_(2, index, k)
        self.v.index_copy_(2, index, v)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.k = self.k.index_select(0, rows)
        self.v = self.v.index_select(0, rows)

    def attend(self, q: torch.Tensor, mask: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
        """q (B, H, 1, D) over every slot of the cache, ``mask`` (B, 1, 1, capacity) True where a
        query sees a key -> (B, H, 1, D)."""
        return F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask, dropout_p=dropout)

    def tensors(self) -> list[torch.Tensor]:
        return [self.k, self.v]


def padding_bias(real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """real (B, W) True where a key slot holds a real token -> (B, 1, 1, W) additive bias: 0
    there, -inf on padding (``shared_history_attention``'s ``hist_bias``)."""
    bias = torch.zeros(real.shape[0], 1, 1, real.shape[1], dtype=dtype, device=real.device)
    return bias.masked_fill_(~real[:, None, None, :], float("-inf"))


def shared_history_attention(
    q: torch.Tensor, hist_k: torch.Tensor, hist_v: torch.Tensor, hist_bias: torch.Tensor | None,
    own_k: torch.Tensor, own_v: torch.Tensor, own_mask: torch.Tensor | None, paths: int,
) -> torch.Tensor:
    """Attention of rows that run in groups of ``paths`` over one shared history, then keys of
    their own: what ``scaled_dot_product_attention`` gives over each row's keys
    ``cat(its series' history, its own)``, but for rounding, with the history never copied per
    row (a series' paths meet its history keys as one product).

    q (N, H, L, D), N = B * paths, rows in runs of ``paths`` per series; hist_k, hist_v
    (B, H, W, D); hist_bias (B, 1, 1, W) 0 or -inf (padding), or None; own_k, own_v
    (N, H, T, D); own_mask broadcasting to (N, H, L, T), True where a query sees its own key,
    or None. Every query must see at least one history key. -> (N, H, L, D).
    """
    n, heads, length, head_dim = q.shape
    b = hist_k.shape[0]
    q = q * head_dim**-0.5
    # (B, H, P * L, D): a series' paths' queries as the rows of one product over its history
    q_series = q.view(b, paths, heads, length, head_dim).transpose(1, 2)
    q_series = q_series.reshape(b, heads, paths * length, head_dim)
    # one query a row (a decode step): its few own keys by products and a sum, cheaper on a
    # CPU than a batch of N x H (1 x D) @ (D x T) products
    single = length == 1 and q.device.type == "cpu"
    if single:
        own = (q * own_k).sum(-1)[:, :, None, :]  # (N, H, 1, T)
    else:
        own = torch.matmul(q, own_k.transpose(-1, -2))  # (N, H, L, T)
    if own_mask is not None:
        own = own.masked_fill(~own_mask, float("-inf"))
    # (B, H, P * L, T)
    own_series = own.view(b, paths, heads, length, -1).transpose(1, 2)
    own_series = own_series.reshape(b, heads, paths * length, -1)
    if q.device.type == "cpu" and _CPU_FLASH is not None:
        # the history part by the fused kernel, which also gives each query's log-sum-exp
        # (B, H, P * L, D) normalized over the history, (B, H, P * L)
        out, lse = _CPU_FLASH(q_series, hist_k, hist_v, attn_mask=hist_bias, scale=1.0)[:2]
        lse = lse[..., None]  # (B, H, P * L, 1)
        top = torch.maximum(lse, own_series.amax(-1, keepdim=True))
        hist_total = (lse - top).exp_()  # (B, H, P * L, 1) the history's share, unnormalized
        own_w = (own_series - top).exp_()  # (B, H, P * L, T)
        total = hist_total + own_w.sum(-1, keepdim=True)  # (B, H, P * L, 1)
        out = out * (hist_total / total)
    else:
        hist = torch.matmul(q_series, hist_k.transpose(-1, -2))  # (B, H, P * L, W)
        if hist_bias is not None:
            hist = hist + hist_bias
        # one softmax over both parts: a common maximum, then each part's exponentials
        top = torch.maximum(hist.amax(-1, keepdim=True), own_series.amax(-1, keepdim=True))
        hist_w = (hist - top).exp_()  # (B, H, P * L, W)
        own_w = (own_series - top).exp_()  # (B, H, P * L, T)
        total = hist_w.sum(-1, keepdim=True) + own_w.sum(-1, keepdim=True)  # (B, H, P * L, 1)
        out = torch.matmul(hist_w, hist_v) / total  # (B, H, P * L, D)
    out = out.view(b, heads, paths, length, head_dim).transpose(1, 2).reshape(q.shape)
    own_w = (own_w / total).view(b, heads, paths, length, -1).transpose(1, 2)
    own_w = own_w.reshape(n, heads, length, -1)  # (N, H, L, T)
    if single:
        return out + (own_w.transpose(-1, -2) * own_v).sum(-2, keepdim=True)  # (N, H, 1, D)
    return out + torch.matmul(own_w, own_v)  # (N, H, L, D)


# torch's fused CPU attention kernel, which returns the log-sum-exp beside the output (the
# public scaled_dot_product_attention drops it); None where this torch lacks it
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)

# Causal attention over windows this long runs in CAUSAL_BLOCKS blocks of queries on a CPU:
# the kernel scores every key of a query block and masks the later ones (its key blocks are
# 512 long), so a block that stops at its own last query skips them. 3 blocks of a 251-long
# window: 0.86x (head size 32) and 0.75x (16) the one call's time; under 160, no gain.
CAUSAL_BLOCKS_FROM = 160
CAUSAL_BLOCKS = 3


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, H, L, D) -> plain causal attention (B, H, L, D): what
    ``scaled_dot_product_attention(is_causal=True)`` gives, but for rounding. On a CPU with no
    gradient (``fuse_on_cpu``): the compiled kernel of ``native_attention`` where it runs; else,
    for L >= ``CAUSAL_BLOCKS_FROM``, query block [a, b) attends keys [0, b) (its last b - a keys
    under a causal bias), written into one (B, L, H, D) buffer."""
    b, heads, length, _ = q.shape
    if not fuse_on_cpu(q):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    native = native_attention.causal_attention(q, k, v)  # None where it does not run
    if native is not None:
        return native
    if _CPU_FLASH is None or length < CAUSAL_BLOCKS_FROM:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = q.new_empty(b, length, heads, v.shape[-1])  # (B, L, H, D)
    bounds = [length * i // CAUSAL_BLOCKS for i in range(CAUSAL_BLOCKS + 1)]
    for start, end in zip(bounds[:-1], bounds[1:]):
        rows, keys, values = q[:, :, start:end], k[:, :, :end], v[:, :, :end]
        if start == 0:
            part = _CPU_FLASH(rows, keys, values, is_causal=True)[0]
        else:
            bias = _causal_tail_bias(start, end, q.dtype, q.device)  # (end - start, end)
            part = _CPU_FLASH(rows, keys, values, attn_mask=bias)[0]
        out[:, start:end] = part.transpose(1, 2)  # (B, end - start, H, D)
    return out.transpose(1, 2)


@functools.lru_cache(maxsize=64)
def _causal_tail_bias(start: int, end: int, dtype: torch.dtype,
                      device: torch.device) -> torch.Tensor:
    """(end - start, end): 0 where query ``start + i`` sees key j (j <= start + i), -inf after."""
    later = torch.ones(end - start, end, dtype=torch.bool, device=device).triu(start + 1)
    return torch.zeros(end - start, end, dtype=dtype, device=device).masked_fill_(
        later, float("-inf"))


class SharedHistoryKV:
    """Keys/values of rows that run in groups of ``paths`` over one shared history: each series'
    history once, (B, H, W, D), and each row's own new tokens, (B * paths, H, T, D), where the
    capacity is W + T and rows come in runs of ``paths`` per series.

    It is addressed like a ``KVCache`` of (B * paths, H, W + T, D) (slot ``W + t`` is the row's
    ``t``-th own token), and attending over it gives what attending over that cache, with the
    history copied into every row, gives, but for rounding (``shared_history_attention``).
    What a row sees is known here: its series' real history (``hist_real``) and its own tokens
    written so far; the whole history stays in view (no rolling window).
    """

    def __init__(self, hist_k: torch.Tensor, hist_v: torch.Tensor, paths: int, new_slots: int,
                 hist_real: torch.Tensor | None = None):
        """hist_k, hist_v (B, H, W, D): each series' history; ``new_slots`` T: room for each
        row's own tokens; hist_real (B, W) True where a history slot holds a real token (None:
        all do)."""
        b, heads, self.width, head_dim = hist_k.shape
        self.paths = paths
        self.hist_k, self.hist_v = hist_k.contiguous(), hist_v.contiguous()
        self.hist_bias = None if hist_real is None else padding_bias(hist_real, hist_k.dtype)
        own = (b * paths, heads, new_slots, head_dim)
        self.own_k = hist_k.new_zeros(own)
        self.own_v = hist_v.new_zeros(own)
        self._own_slots = torch.arange(new_slots, device=hist_k.device)  # (T,)
        self.own_seen = torch.zeros(new_slots, dtype=torch.bool, device=hist_k.device)  # (T,)

    @property
    def capacity(self) -> int:
        return self.width + self.own_k.shape[2]

    def write_at(self, slot: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v (B * paths, H, 1, D) go to slot ``slot`` (0-d int64 on the device, >= W); the
        rows see their own slots up to it from now on."""
        index = (slot - self.width).reshape(1)  # (1,) the row's own slot
        self.own_k.index_copy_(2, index, k)
        self.own_v.index_copy_(2, index, v)
        self.own_seen = self._own_slots <= index

    def attend(self, q: torch.Tensor, mask: torch.Tensor | None = None,
               dropout: float = 0.0) -> torch.Tensor:
        """q (N, H, 1, D), N = B * paths -> (N, H, 1, D) over the slots each row holds.

        ``mask`` (the caller's key mask, (N, C) or (N, 1, 1, C)) is not read: what each row
        sees is held here and equals it (``tests/model/test_shared_history_kv.py``). No dropout:
        an inference cache."""
        if dropout:
            raise ValueError("SharedHistoryKV is an inference cache: no attention dropout")
        return shared_history_attention(
            q, self.hist_k, self.hist_v, self.hist_bias, self.own_k, self.own_v, self.own_seen,
            self.paths,
        )

    def tensors(self) -> list[torch.Tensor]:
        return [self.hist_k, self.hist_v, self.own_k, self.own_v]


# what a cached decode step writes its new token to and attends over
DecodeCache = KVCache | SharedHistoryKV


class AttentionProjections(nn.Module):
    """The four biased projections (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), rotary
    buffer, head split."""

    # added by name in __init__; declared here for the type checker
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    out_proj: nn.Linear

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            self.add_module(name, nn.Linear(d_model, d_model))
        self.rotary = Rotary(self.head_dim)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, L, D)

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, L, D) attention output -> ``out_proj`` of (B, L, H * D)."""
        b, _, length, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, length, -1))


class SelfAttention(AttentionProjections):
    """Causal multi-head self-attention with rotary q/k and optional KV cache."""

    def __init__(
        self, d_model: int, n_heads: int, attn_dropout: float = 0.0, resid_dropout: float = 0.0
    ):
        super().__init__(d_model, n_heads)
        self.attn_dropout = attn_dropout
        self.out_dropout = nn.Dropout(resid_dropout)
        order = pair_order(n_heads, self.head_dim)
        # q and k in pair order: the CPU's rotary is one complex product (``rotate_pairs``)
        self._qkv = FusedLinears(self.q_proj, self.k_proj, self.v_proj, orders=(order, order, None))

    def forward(
        self,
        x: torch.Tensor,
        rope: RotaryAngles,
        mask: torch.Tensor | None = None,
        cache: DecodeCache | None = None,
        cache_start: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """x (B, L, d); rope: the rotary factors of its positions (``Rotary.angles``).

        mask: None means plain causal attention over ``x`` itself (or over every
        cached slot up to the end when a cache is given); else a boolean
        (B, 1, L, S) where True lets a query see a key; S is the number of keys
        (L without cache, ``cache_start + L`` with one).
        With a cache, this call's keys/values are written to slots
        [cache_start, cache_start + L) and attention runs over slots [0, cache_start + L).
        ``cache_start`` a 0-d tensor (one new token, L == 1): it is written to that slot and
        attention runs over every slot of the cache (B, H, capacity, D); ``mask``
        (B, 1, 1, capacity) is then required and hides the slots the row does not hold.
        """
        length = x.shape[1]
        q, k, v = self.project(x, rope)  # (B, H, L, D) each
        causal = mask is None
        if isinstance(cache_start, torch.Tensor):
            if cache is None or mask is None or length != 1:
                raise ValueError(
                    "a tensor cache_start needs a cache, a mask and one new token per row"
                )
            return self.finish(self.attend_at_slot(q, k, v, cache, cache_start, mask))
        if isinstance(cache, SharedHistoryKV):
            raise TypeError("a SharedHistoryKV takes one new token per row at a tensor slot")
        if cache is not None:
            cache.write(cache_start, k, v)
            end = cache_start + length
            k, v = cache.k[:, :, :end], cache.v[:, :, :end]  # (B, H, S, D)
            causal = causal and cache_start == 0  # one new query over past keys needs no mask
        dropout = self.attn_dropout if self.training else 0.0
        if causal and length > 1 and not dropout:
            out = causal_attention(q, k, v)  # (B, H, L, D)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and length > 1
            )  # (B, H, L, D)
        return self.finish(out)  # (B, L, d)

    # ---- the pieces of a cached decode step (one new token per row), also run apart by the
    # engine's shared decode step (kronos_core.engine.shared_step), which projects the rows of
    # several jobs at once and attends each job's rows over that job's own cache ----
    def project(
        self, x: torch.Tensor, rope: RotaryAngles
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, L, d), rope (B, 1, L, D) -> rotated q, rotated k, v: (B, H, L, D) each. On the
        CPU with no gradient (``fuse_on_cpu``) q and k come in ``pair_order``, a layout every
        cache and attention of that path shares (scores equal but for rounding)."""
        b, length, _ = x.shape
        if fuse_on_cpu(x):
            # (B, L, 3, H, D): a view of the one product (B, L, 3 * d)
            qkv = self._qkv(x).view(b, length, 3, self.n_heads, self.head_dim)
            q, k = rotate_pairs(qkv[:, :, :2], rope)  # (B, H, L, D) each, in ``pair_order``
            return q, k, qkv[:, :, 2].transpose(1, 2)
        qk = torch.stack((self.heads(self.q_proj(x)), self.heads(self.k_proj(x))))
        qk = apply_rotary(qk, rope)  # q and k rotated in one pass: (2, B, H, L, D)
        return qk[0], qk[1], self.heads(self.v_proj(x))

    def attend_at_slot(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: DecodeCache,
        slot: torch.Tensor, mask: torch.Tensor,
    ) -> torch.Tensor:
        """One new token per row: k, v (B, H, 1, D) go to ``slot`` (0-d) of ``cache``, and q
        (B, H, 1, D) attends over every slot of it, ``mask`` (B, 1, 1, capacity) hiding the
        slots the row does not hold -> (B, H, 1, D)."""
        cache.write_at(slot, k, v)
        # shapes fixed by the cache
        return cache.attend(q, mask, self.attn_dropout if self.training else 0.0)

    def finish(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, L, D) attention output -> (B, L, d): ``out_proj`` and the residual dropout."""
        return self.out_dropout(self.merge(out))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))`` then ``x + ffn(norm2(x))``."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, ffn_dropout: float = 0.0,
                 attn_dropout: float = 0.0, resid_dropout: float = 0.0):
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.self_attn = SelfAttention(d_model, n_heads, attn_dropout, resid_dropout)
        self.norm2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, ff_dim, ffn_dropout)

    def forward(self, x: torch.Tensor, rope: RotaryAngles, mask: torch.Tensor | None = None,
                cache: DecodeCache | None = None, cache_start: int | torch.Tensor = 0
                ) -> torch.Tensor:
        """x (B, L, d); rope: the rotary factors of its positions (``stack_angles``)."""
        x = x + self.self_attn(self.norm1(x), rope, mask, cache, cache_start)
        return x + self.ffn(self.norm2(x))


def padded_positions_and_mask(
    pad: torch.Tensor, length: int, padded: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Positions and causal mask for a left-padded batch.

    pad (B,) number of padding slots at the start of each row. Returns
    positions (B, L) with each row's first real token at 0, and a boolean mask
    (B, 1, L, L): causal, no real query sees padding, and each padding query
    sees only itself (so no row of the softmax is empty). The mask is None when
    no row is padded. ``padded``: whether any row is, when the caller knows it on the
    host (the engine does); None reads ``pad`` (a host-device synchronisation on a GPU).
    """
    slots = torch.arange(length, device=pad.device)
    positions = (slots[None, :] - pad[:, None]).clamp(min=0)  # (B, L)
    if padded is None:
        padded = int(pad.max()) > 0
    if not padded:
        return positions, None
    causal = slots[None, :] <= slots[:, None]  # (L, L) query x key
    key_real = slots[None, :] >= pad[:, None]  # (B, L)
    mask = causal[None] & key_real[:, None, :]  # (B, L, L)
    mask = mask | torch.eye(length, dtype=torch.bool, device=pad.device)[None]
    return positions, mask[:, None]  # (B, 1, L, L)
