"""Memory model for inference, and a meter that measures it.

``estimate_inference_bytes`` predicts the peak bytes one engine call needs for
a batch (weights, caches, inputs and the largest transient working set of the
four phases: tokenize, prefill, decode/recompute, detokenize).
``max_batch_that_fits`` inverts it for a byte budget; the service sizes its
shards with it. ``LiveTensorMeter`` measures the peak of live tensor bytes on
any device (``torch.cuda.max_memory_allocated`` is the GPU's own measure).

Working-set constants are counted from the block structure (see
``_block_activation``); ``kronos bench --memory`` compares estimates with
measured peaks and prints the error.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from kronos_core.model.config import DEP_HEADS, KronosConfig, TokenizerConfig

SAFETY = 1.10  # headroom on the estimate for allocator rounding and small temporaries
ATTN_WIDTH = 4  # d-wide tensors alive at a block's peak (calibrated with LiveTensorMeter)
FFN_WIDTH = 2  # ff-wide tensors alive at a block's peak (calibrated with LiveTensorMeter)


def _block_activation(rows: int, length: int, d: int, ff: int, heads: int, act_bytes: int, masked: bool) -> int:
    """Transient bytes of one transformer block over (rows, length) tokens.

    Counting every intermediate gives ~10 d-wide and 4 ff-wide tensors per token,
    but many die before the peak; the widths above were fitted to measured peaks
    (the estimate stays 10-25% above them, SAFETY included). A padded (ragged)
    batch also holds a boolean mask (rows, length, length).
    """
    tokens = rows * length
    per_token = (ATTN_WIDTH * d + FFN_WIDTH * ff) * act_bytes
    mask = rows * length * length if masked else 0
    return tokens * per_token + mask


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int  # model + tokenizer parameters and buffers
    inputs: int  # candles, time features and token buffers of the whole batch
    caches: int  # trunk and s2-head key/value caches
    transient: int  # the largest phase working set
    total: int  # (weights + inputs + caches + transient) * SAFETY

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("weights", "inputs", "caches", "transient", "total")}


def _param_bytes(model_cfg: KronosConfig, tok_cfg: TokenizerConfig) -> int:
    d, ff, v1, v2 = model_cfg.d_model, model_cfg.ff_dim, 2**model_cfg.s1_bits, 2**model_cfg.s2_bits
    block = 4 * (d * d + d) + 3 * d * ff + 2 * d
    model = (v1 + v2) * d + (2 * d * d + d) + 136 * d + model_cfg.n_layers * block + d
    model += 4 * (d * d + d) + d + (d + 1) * (v1 + v2)
    td, tff, bits = tok_cfg.d_model, tok_cfg.ff_dim, tok_cfg.codebook_dim
    tblock = 4 * (td * td + td) + 3 * td * tff + 2 * td
    tok = (tok_cfg.d_in + 1) * td + (tok_cfg.n_enc_layers + tok_cfg.n_dec_layers - 2) * tblock
    tok += (td + 1) * bits + (tok_cfg.s1_bits + 1) * td + (bits + 1) * td + (td + 1) * tok_cfg.d_in
    return 4 * (model + tok)


def estimate_inference_bytes(*args, **kwargs) -> int:
    """Peak bytes for ``batch`` series in one engine call; the arguments of ``memory_breakdown``."""
    return memory_breakdown(*args, **kwargs).total


def memory_breakdown(
    model_cfg: KronosConfig,
    tokenizer_cfg: TokenizerConfig,
    batch: int,
    lookback: int,
    horizon: int,
    sample_count: int = 1,
    dtype: torch.dtype = torch.float32,
    max_context: int = 512,
    ragged: bool = True,
    include_weights: bool = True,
) -> MemoryEstimate:
    """``estimate_inference_bytes`` with its parts. ``ragged``: assume padded rows (masks)."""
    if batch <= 0:
        return MemoryEstimate(0, 0, 0, 0, 0)
    n = batch * sample_count
    act = torch.tensor([], dtype=dtype).element_size()
    d, ff, layers = model_cfg.d_model, model_cfg.ff_dim, model_cfg.n_layers
    td, tff = tokenizer_cfg.d_model, tokenizer_cfg.ff_dim
    vocab = 2**model_cfg.s1_bits + 2**model_cfg.s2_bits
    window = min(lookback, max_context)
    capacity = window + horizon
    total_len = lookback + horizon

    inputs = n * (lookback * 6 * 4 + lookback * 5 * 4 + horizon * 5 * 4)  # candles + stamps (float32)
    inputs += n * total_len * (5 * 4 + 2 * 8)  # concatenated stamps + two int64 token sequences
    caches = (2 * layers * n * capacity * d + 2 * n * capacity * d) * act

    tokenize = _block_activation(n, lookback, td, tff, tokenizer_cfg.n_heads, 4, ragged) + n * lookback * (
        2 * td + tokenizer_cfg.codebook_dim
    ) * 4
    embed = n * window * 8 * d * act
    prefill = max(embed, _block_activation(n, window, d, ff, model_cfg.n_heads, act, ragged))
    prefill += n * window * d * act * 3 + 2 * n * DEP_HEADS * window * (d // DEP_HEADS) * act  # hidden + dep k/v
    steps = n * vocab * 4 * 6  # logits, filtered copies, probabilities, cdf (float64)
    if lookback + horizon - 1 > max_context:  # rows recomputed over a full window each step
        steps += _block_activation(n, max_context, d, ff, model_cfg.n_heads, act, False) + n * max_context * d * act * 3
    dec_len = min(total_len, max_context)
    detokenize = _block_activation(n, dec_len, td, tff, tokenizer_cfg.n_heads, 4, ragged)
    transient = max(tokenize, prefill, steps, detokenize)
    weights = _param_bytes(model_cfg, tokenizer_cfg) if include_weights else 0
    total = int((weights + inputs + caches + transient) * SAFETY)
    return MemoryEstimate(weights, inputs, caches, transient, total)


def max_batch_that_fits(
    model_cfg: KronosConfig,
    tokenizer_cfg: TokenizerConfig,
    budget_bytes: int,
    lookback: int,
    horizon: int,
    sample_count: int = 1,
    dtype: torch.dtype = torch.float32,
    max_context: int = 512,
    include_weights: bool = True,
) -> int:
    """Largest number of series whose estimate stays within ``budget_bytes`` (0 if none fits)."""
    def fits(b: int) -> bool:
        return estimate_inference_bytes(
            model_cfg, tokenizer_cfg, b, lookback, horizon, sample_count, dtype, max_context,
            include_weights=include_weights,
        ) <= budget_bytes

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > 1 << 24:
            return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


class LiveTensorMeter(TorchDispatchMode):
    """Tracks bytes of tensor storages created inside the ``with`` block; ``peak`` is their maximum.

    Storages that existed before (weights) are not counted. Works on any device;
    slows execution, so use it for measurement only.
    """

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = id(storage)
                if key in self._seen:
                    continue
                nbytes = storage.nbytes()
                self._seen.add(key)
                self.current += nbytes
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._release, key, nbytes)
        return out
