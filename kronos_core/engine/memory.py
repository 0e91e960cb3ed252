"""Memory model for inference, and a meter that measures it.

``estimate_inference_bytes`` predicts the peak bytes one engine call needs for
a batch: weights, inputs (candles, time features, token sequences), and the
largest of the phases, each with what is alive during it:

* tokenize: the tokenizer's encoder over the whole lookback;
* prefill: the key/value caches (allocated here) + one trunk pass over the window;
* sample: caches + the prefill's hidden states + logits, sorted copies, probabilities;
* recompute (exact mode once the window slides, or recompute mode): caches + a trunk
  pass over ``max_context`` tokens for every row;
* detokenize (caches freed): the tokenizer's decoder over the last window.

A pass costs per token: the residual stream and the RMSNorm work in float32
(12 bytes per model dim) plus three ff-wide tensors in the activation dtype
(``_pass_bytes``); attention runs in fused kernels, with no (L, L) score
matrix. A padded (ragged) batch also holds a boolean (rows, L, L) mask. The
constants were read off ``LiveTensorMeter`` on single blocks and whole calls;
``tests/engine/test_memory.py`` checks estimate >= peak and < 1.5 x peak on a
grid, and ``kronos bench --memory`` prints the error. Parameters are counted
from the modules themselves (built on the meta device).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from kronos_core.model.config import KronosConfig, TokenizerConfig
from kronos_core.model.kronos import FusedInputEmbedding

SAFETY = 1.10  # headroom on the estimate for allocator rounding and small temporaries
# bytes per model dim per token of a pass: residual, norm (float32), block input, output, and
# on a CPU a block of the causal attention's queries beside its whole output
RESIDUAL_BYTES = 22
FFN_WIDTH = 3  # ff-wide tensors alive at a block's peak, in the activation dtype
# bytes per vocabulary entry per row while sampling (logits, sorted, probs, float64 cdf): the
# tensor draw's (a GPU's); the CPU's compiled draw (top_p_rows) holds logits and probs only
SAMPLE_BYTES = 24


def _pass_bytes(tokens: int, d: int, ff: int, act_bytes: int) -> int:
    """Transient bytes of one pass of transformer blocks over ``tokens`` tokens (blocks run one at a
    time)."""
    return tokens * (RESIDUAL_BYTES * d + FFN_WIDTH * ff * act_bytes)


def shares_history(samples: int, lookback: int, horizon: int, max_context: int,
                   sliding: str) -> bool:
    """Whether the engine keeps one copy of each series' history for its sample paths
    (``SharedHistoryKV``): several paths, and every row cached to the end."""
    return samples > 1 and sliding != "recompute" and lookback + horizon - 1 <= max_context


def _cache_bytes(m: KronosConfig, series: int, samples: int, window: int, horizon: int, act: int,
                 sliding: str, shared: bool) -> int:
    """Trunk caches (2 per layer) and the s2 head's keys/values: ``window + horizon`` slots a row,
    or with ``shared`` histories ``window`` slots a series and ``horizon`` a row."""
    if sliding == "recompute":
        return 0
    slots = series * window + series * samples * horizon if shared \
        else series * samples * (window + horizon)
    return (2 * m.n_layers + 2) * slots * m.d_model * act


def _mask_bytes(rows: int, length: int, ragged: bool) -> int:
    """The boolean (rows, 1, L, L) mask of a left-padded batch."""
    return rows * length * length if ragged else 0


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of the module a config builds (what the inference estimate and the planner
    count)."""

    total: int  # every parameter (frozen ones included)
    trainable: int  # parameters with requires_grad (get gradients and optimizer state)
    linear: int  # weights of nn.Linear layers (what autocast copies to low precision)
    largest: int  # the largest single trainable tensor


@functools.cache
def count_parameters(cfg: KronosConfig | TokenizerConfig) -> ParamCounts:
    """Exact counts from the module a config builds, built on the meta device (no memory used);
    cached per config. The one parameter counter of the code base."""
    from torch import nn

    from kronos_core.model.kronos import Kronos
    from kronos_core.model.tokenizer import KronosTokenizer

    with torch.device("meta"):
        module: nn.Module = Kronos(cfg) if isinstance(cfg, KronosConfig) else KronosTokenizer(cfg)
    params = list(module.parameters())
    trainable = [p for p in params if p.requires_grad]
    linear = sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
    return ParamCounts(sum(p.numel() for p in params), sum(p.numel() for p in trainable), linear,
                       max(p.numel() for p in trainable))


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int  # model + tokenizer parameters and the CPU one-table embedding (float32)
    inputs: int  # candles, time features and token sequences of the whole batch
    caches: int  # trunk and s2-head key/value caches
    transient: int  # working set of the peak phase beyond inputs, caches included where alive
    phase: str  # the peak phase: tokenize | prefill | sample | recompute | detokenize
    total: int  # (weights + inputs + transient) * SAFETY

    def as_dict(self) -> dict[str, int | str]:
        return {
            k: getattr(self, k)
            for k in ("weights", "inputs", "caches", "transient", "phase", "total")
        }


def _param_bytes(model_cfg: KronosConfig, tok_cfg: TokenizerConfig) -> int:
    """Model + tokenizer parameters, and the one-table input embedding a CPU's inference makes
    from them (``kronos_core.model.kronos.FusedInputEmbedding``: a row per token of each
    vocabulary, per time-table row and for the bias; counted on every device, a few MB at most)."""
    params = count_parameters(model_cfg).total + count_parameters(tok_cfg).total
    return 4 * (params + FusedInputEmbedding.rows(model_cfg) * model_cfg.d_model)


def estimate_inference_bytes(*args, **kwargs) -> int:
    """Peak bytes for ``batch`` series in one engine call; the arguments of ``memory_breakdown``."""
    return memory_breakdown(*args, **kwargs).total


def _phases(m: KronosConfig, t: TokenizerConfig, series: int, samples: int, lookback: int,
            horizon: int, act: int, max_context: int, ragged: bool, sliding: str) -> dict[str, int]:
    """Working set of each phase (bytes, beyond the inputs) for ``series`` x ``samples`` rows."""
    d, vocab = m.d_model, 2**m.s1_bits + 2**m.s2_bits
    n = series * samples
    window = min(lookback, max_context)
    shared = shares_history(samples, lookback, horizon, max_context, sliding)
    caches = _cache_bytes(m, series, samples, window, horizon, act, sliding, shared)
    # last pass's hidden states + the s2 head's keys/values, alive while sampling
    per_token_out = 3 * d * act
    phases = {  # each series is encoded once, whatever its paths
        "tokenize": _pass_bytes(series * lookback, t.d_model, t.ff_dim, act)
        + _mask_bytes(series, lookback, ragged),
    }
    if sliding != "recompute":
        # each series' window runs once, whatever its paths
        phases["prefill"] = (
            caches + _pass_bytes(series * window, d, m.ff_dim, act)
            + _mask_bytes(series, window, ragged)
        )
    width = window
    if sliding == "recompute" or (sliding == "exact" and lookback + horizon - 1 > max_context):
        # Equal-length rows leave the caches together (freed); ragged rows may recompute beside
        # cached ones.
        width = min(lookback + horizon - 1, max_context)
        phases["recompute"] = (caches if ragged else 0) + _pass_bytes(n * width, d, m.ff_dim, act) \
            + _mask_bytes(n, width, ragged)
    # the hidden states of the widest pass: the prefill's (a series once) or a recompute's
    passed = n if "recompute" in phases else series
    phases["sample"] = caches + passed * width * per_token_out + n * vocab * SAMPLE_BYTES
    dec_len = min(lookback + horizon, max_context)
    # the decoder runs each series' history part once and each path's horizon on its own
    dec_tokens = n * dec_len if samples == 1 or dec_len <= horizon \
        else series * (dec_len - horizon) + n * horizon
    phases["detokenize"] = _pass_bytes(dec_tokens, t.d_model, t.ff_dim, act) + _mask_bytes(
        n, dec_len, ragged
    )
    return phases


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
    sliding: str = "exact",
) -> MemoryEstimate:
    """``estimate_inference_bytes`` with its parts.

    lookback: the longest series' history (a ragged batch is left-padded to it);
    ragged: assume padded rows (masks); sliding: the engine's mode (exact | rolling | recompute).
    """
    if batch <= 0:
        return MemoryEstimate(0, 0, 0, 0, "none", 0)
    n = batch * sample_count
    act = torch.tensor([], dtype=dtype).element_size()
    total_len = lookback + horizon
    # candles + stamps (float32)
    inputs = n * (lookback * 6 * 4 + lookback * 5 * 4 + horizon * 5 * 4)
    inputs += n * total_len * (5 * 4 + 2 * 8)  # concatenated stamps + two int64 token sequences
    shared = shares_history(sample_count, lookback, horizon, max_context, sliding)
    caches = _cache_bytes(
        model_cfg, batch, sample_count, min(lookback, max_context), horizon, act, sliding, shared
    )
    phases = _phases(
        model_cfg, tokenizer_cfg, batch, sample_count, lookback, horizon, act, max_context, ragged,
        sliding,
    )
    phase = max(phases, key=phases.__getitem__)
    weights = _param_bytes(model_cfg, tokenizer_cfg) if include_weights else 0
    total = int((weights + inputs + phases[phase]) * SAFETY)
    return MemoryEstimate(weights, inputs, caches, phases[phase], phase, total)


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
