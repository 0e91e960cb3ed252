"""Memory planner for Kronos training and inference (``kronos plan``).

Training memory of one device, for a micro-batch of ``batch`` sequences of
``window`` tokens (T = batch * window tokens):

* persistent: fp32 parameters (4 B each), AdamW state (two fp32 moments,
  8 B), the frozen tokenizer's weights, DDP's gradient buckets (4 B, with
  ``gpus > 1``);
* at the step's peak, the larger of
  - the activations autograd saves for backward plus the head's transient
    at the start of backward (+ autocast's low-precision weight copies, + the
    gradients when accumulating), and
  - the gradients (4 B) plus the optimizer step's temporaries.

The saved activations are counted tensor by tensor from the block structure
(``block_saved_bytes``; checked against ``LiveTensorMeter`` traces on CPU):
per token and block, fp32: rsqrt and normalised input of both norms (2 x 4d),
the linear inputs (2 x 4d), rotary cos/sin (2 x 4 head_dim), rotated q, k,
v and the attention output (4 x 4d), the log-sum-exp (4 x heads), the two
residual sums (2 x 4d) and the four SwiGLU tensors (4 x 4 ff). Under autocast
each linear keeps its own low-precision copy of its input and the rotary
tables are copied per use. With checkpointing each block keeps only its input
(4d) and one block is recomputed at a time in backward.

Inference reuses ``kronos_core.engine.memory.memory_breakdown`` and splits its
caches into the trunk's key/value caches and the s2 head's caches.
``kronos plan --measure-cpu`` measures both against the CPU (see
``docs/planner.md``). Parameters are counted by
``kronos_core.engine.memory.count_parameters``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from kronos_core.engine.memory import count_parameters, memory_breakdown
from kronos_core.model.config import DEP_HEADS, KronosConfig, TokenizerConfig

PRECISIONS = ("fp32", "bf16", "fp16")

TOKENIZER_BASE = TokenizerConfig(
    d_in=6, d_model=256, n_heads=4, ff_dim=512, n_enc_layers=4, n_dec_layers=4, s1_bits=10,
    s2_bits=10,
)
TOKENIZER_2K = TokenizerConfig(
    d_in=6, d_model=256, n_heads=4, ff_dim=512, n_enc_layers=4, n_dec_layers=4, s1_bits=10,
    s2_bits=10, group_size=5,
)
# Published checkpoints (shared/docs/kronos-model.md): model config, tokenizer config, context.
MODEL_PRESETS: dict[str, tuple[KronosConfig, TokenizerConfig, int]] = {
    "mini": (
        KronosConfig(s1_bits=10, s2_bits=10, n_layers=4, d_model=256, n_heads=4, ff_dim=512),
        TOKENIZER_2K, 2048,
    ),
    "small": (
        KronosConfig(s1_bits=10, s2_bits=10, n_layers=8, d_model=512, n_heads=8, ff_dim=1024),
        TOKENIZER_BASE, 512,
    ),
    "base": (
        KronosConfig(s1_bits=10, s2_bits=10, n_layers=12, d_model=832, n_heads=16, ff_dim=2048),
        TOKENIZER_BASE, 512,
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    model: KronosConfig
    tokenizer: TokenizerConfig
    max_context: int


def _read_config(folder: Path, cls):
    data = json.loads((folder / "config.json").read_text())
    if cls is KronosConfig and "n_enc_layers" in data:
        raise ValueError(f"{folder}/config.json is a tokenizer config; give the model folder "
                         "(and this one with --tokenizer)")
    if cls is TokenizerConfig and "n_layers" in data:
        raise ValueError(f"{folder}/config.json is a model config, not a tokenizer's")
    return cls.from_dict(data)


def resolve_model(spec: str, tokenizer: str | None = None) -> ResolvedModel:
    """``mini|small|base`` (``kronos-`` prefix allowed) or a folder.

    A folder is a model folder holding ``config.json`` (tokenizer: ``tokenizer``
    if given, else Tokenizer-base) or a bundle / training output holding
    ``model/config.json`` and ``tokenizer/config.json`` (``kronos.json`` may
    give ``max_context``).
    """
    key = spec.lower().removeprefix("kronos-")
    tok_override = None
    if tokenizer is not None:
        if not (Path(tokenizer) / "config.json").is_file():
            raise ValueError(f"--tokenizer {tokenizer}: no config.json there")
        tok_override = _read_config(Path(tokenizer), TokenizerConfig)
    if key in MODEL_PRESETS:
        model, tok, ctx = MODEL_PRESETS[key]
        return ResolvedModel(f"kronos-{key}", model, tok_override or tok, ctx)
    folder = Path(spec)
    if not folder.is_dir():
        raise ValueError(
            f"--model {spec!r}: not one of {', '.join(MODEL_PRESETS)} and not a folder"
        )
    model_dir = folder / "model" if (folder / "model" / "config.json").is_file() else folder
    if not (model_dir / "config.json").is_file():
        raise ValueError(
            f"{folder}: no config.json (nor model/config.json); give a checkpoint folder"
        )
    model = _read_config(model_dir, KronosConfig)
    tok_dir = folder / "tokenizer"
    tok = tok_override or (_read_config(tok_dir, TokenizerConfig)
                           if (tok_dir / "config.json").is_file() else TOKENIZER_BASE)
    meta = folder / "kronos.json"
    ctx = int(json.loads(meta.read_text()).get("max_context", 512)) if meta.is_file() else 512
    return ResolvedModel(str(folder), model, tok, ctx)


def _act_bytes(precision: str) -> int:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return 4 if precision == "fp32" else 2


def block_saved_bytes(d: int, ff: int, heads: int, precision: str) -> int:
    """Bytes one transformer block saves for backward, per token."""
    a = _act_bytes(precision)
    mixed = a < 4
    hd = d // heads
    norms = 2 * (4 + 4 * d)  # rsqrt + normalised fp32 input, both norms
    linear_inputs = (5 * a * d) if mixed else 2 * 4 * d  # q/k/v and w1/w3 each cast their input
    rotary = 4 * hd * a if mixed else 2 * hd * 4  # cos/sin (copied per q and k under autocast)
    attention = 4 * a * d + 4 * heads  # rotated q, k, v, output; log-sum-exp
    residuals = 2 * 4 * d
    ffn = 4 * a * ff  # w1 out, silu, w3 out, product
    return norms + linear_inputs + rotary + attention + residuals + ffn


def head_saved_bytes(d: int, vocab: int, precision: str) -> int:
    """Bytes per token saved outside the blocks: embedding, final norm, s2 head, log-softmax."""
    a = _act_bytes(precision)
    mixed = a < 4
    embed = (2 * a * d if mixed else 8 * d) + 40 + 4 * d  # fusion input, int64 stamps, x0
    final_norm = 4 + 4 * d + (3 * a * d if mixed else 4 * d)  # + inputs of proj_s1, dep k, dep v
    dep = (a * d if mixed else 4 * d) + (a * d if mixed else 2 * d)  # query input, rotary tables
    dep += 4 * a * d + 4 * DEP_HEADS + 4 * d  # q, k, v, output, lse, residual sum
    dep += 4 + 4 * d + (a * d if mixed else 4 * d)  # dep norm + input of proj_s2
    return embed + final_norm + dep + 4 * vocab + 16  # fp32 log-softmax of both heads, targets


def head_transient_bytes(vocab: int) -> int:
    """Per token, alive on top of the saved tensors at the start of backward: the V-wide fp32 logits
    grad."""
    return 4 * vocab


@dataclass(frozen=True)
class TrainPlan:
    window: int
    batch: int  # micro-batch per device
    accumulation: int
    gpus: int
    precision: str
    checkpointing: bool
    n_parameters: int
    parameters: int  # bytes of the fp32 parameters
    gradients: int
    optimizer: int  # AdamW moments
    optimizer_step_temp: int  # temporaries of optimizer.step()
    tokenizer: int  # frozen tokenizer weights
    ddp_buckets: int
    autocast_cache: int  # low-precision weight copies under autocast
    activations_no_checkpointing: int  # saved tensors + backward-start transient, checkpointing off
    activations_checkpointing: int  # the same with per-block checkpointing
    activations: int  # the one in use
    total: int
    total_without_checkpointing: int
    total_with_checkpointing: int

    def as_dict(self) -> dict:
        return asdict(self)


def activation_phases(cfg: KronosConfig, window: int, batch: int, precision: str,
                      checkpointing: bool) -> tuple[int, int]:
    """Activation bytes of one micro-batch at the two candidate peaks of a step.

    (start of backward: saved tensors + the logits gradient; rebuilding a
    checkpointed block late in backward, when the parameter gradients already
    exist: 0 without checkpointing, where that phase is always lower).
    """
    tokens = batch * window
    vocab = 2**cfg.s1_bits + 2**cfg.s2_bits
    block = block_saved_bytes(cfg.d_model, cfg.ff_dim, cfg.n_heads, precision)
    head = head_saved_bytes(cfg.d_model, vocab, precision) + head_transient_bytes(vocab)
    if not checkpointing:
        return tokens * (cfg.n_layers * block + head), 0
    kept = cfg.n_layers * 4 * cfg.d_model  # each block's fp32 input
    recompute = block + 16 * cfg.d_model  # one block rebuilt, plus the grads flowing through it
    return tokens * (kept + head), tokens * (kept + recompute)


def activation_bytes(
    cfg: KronosConfig, window: int, batch: int, precision: str, checkpointing: bool
) -> int:
    """Peak activation bytes of one micro-batch (saved tensors + the largest backward transient)."""
    return max(activation_phases(cfg, window, batch, precision, checkpointing))


def plan_training(
    model_cfg: KronosConfig,
    tok_cfg: TokenizerConfig | None,
    window: int,
    batch: int,
    precision: str = "fp32",
    checkpointing: bool = False,
    accumulation: int = 1,
    gpus: int = 1,
    include_tokenizer: bool = True,
    foreach_optimizer: bool = True,
) -> TrainPlan:
    """Peak bytes on one device while training the predictor with AdamW.

    ``batch``: the micro-batch on this device; ``window``: tokens per sequence.
    ``foreach_optimizer``: AdamW's multi-tensor step (CUDA's default: one
    parameter-sized temporary); False: the per-tensor step (CPU's default: a few
    temporaries of the largest tensor).
    """
    if window < 1 or batch < 0 or accumulation < 1 or gpus < 1:
        raise ValueError(
            f"need window >= 1, batch >= 0, accumulation >= 1, gpus >= 1; "
            f"got window={window}, batch={batch}, accumulation={accumulation}, gpus={gpus}"
        )
    counts = count_parameters(model_cfg)
    params, grads, moments = 4 * counts.total, 4 * counts.trainable, 8 * counts.trainable
    step_temp = 4 * counts.trainable if foreach_optimizer else 3 * 4 * counts.largest
    tokenizer = (
        4 * count_parameters(tok_cfg).total if include_tokenizer and tok_cfg is not None else 0
    )
    ddp = grads if gpus > 1 else 0
    cache = 2 * counts.linear if _act_bytes(precision) < 4 else 0
    held_grads = grads if accumulation > 1 else 0  # gradients of earlier micro-batches stay alive
    phases = {
        ck: activation_phases(model_cfg, window, batch, precision, ck) for ck in (False, True)
    }
    acts = {ck: max(phases[ck]) for ck in (False, True)}

    def total(ck: bool) -> int:
        persistent = params + moments + tokenizer + ddp
        if batch == 0:
            return persistent
        backward_start, rebuild = phases[ck]
        rebuild_peak = rebuild + cache + grads if rebuild else 0
        return persistent + max(
            backward_start + cache + held_grads, rebuild_peak, grads + step_temp
        )

    return TrainPlan(
        window, batch, accumulation, gpus, precision, checkpointing, counts.total, params, grads,
        moments, step_temp, tokenizer, ddp, cache, acts[False], acts[True], acts[checkpointing],
        total(checkpointing), total(False), total(True),
    )


def _largest(fits, limit: int = 1 << 20) -> int:
    """Largest n >= 1 with fits(n) (fits is monotone), 0 if fits(1) fails."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def max_train_batch(
    budget_bytes: int, model_cfg: KronosConfig, tok_cfg: TokenizerConfig | None, window: int,
    precision: str = "fp32", checkpointing: bool = False, **kwargs,
) -> int:
    """Largest micro-batch whose ``plan_training`` total stays within ``budget_bytes`` (0: none)."""
    return _largest(lambda b: plan_training(model_cfg, tok_cfg, window, b, precision, checkpointing,
                                            **kwargs).total <= budget_bytes)


@dataclass(frozen=True)
class InferencePlan:
    batch: int  # series per engine call
    lookback: int
    horizon: int
    sample_count: int
    precision: str
    sliding: str
    weights: int
    inputs: int
    kv_cache: int  # the trunk's key/value caches
    s2_cache: int  # the s2 head's key/value caches
    peak_phase: str  # tokenize | prefill | sample | recompute | detokenize
    caches_at_peak: bool  # the caches are alive in the peak phase (else freed or not yet allocated)
    working_set: int  # the peak phase's bytes besides weights, inputs and (where alive) the caches
    total: int  # predicted peak: weights + inputs + the peak phase (caches included where alive)
    with_headroom: int  # total * engine.memory.SAFETY, what the service sizes its shards with

    def as_dict(self) -> dict:
        return asdict(self)


def plan_inference(
    model_cfg: KronosConfig, tok_cfg: TokenizerConfig, lookback: int, horizon: int, batch: int,
    sample_count: int = 1, precision: str = "fp32", max_context: int = 512, ragged: bool = True,
    sliding: str = "exact",
) -> InferencePlan:
    """Peak bytes of one engine call for ``batch`` series (``memory_breakdown`` with its caches
    split)."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    est = memory_breakdown(
        model_cfg, tok_cfg, batch, lookback, horizon, sample_count, dtype, max_context,
        ragged=ragged, sliding=sliding,
    )
    layers = model_cfg.n_layers
    s2 = est.caches // (layers + 1)  # one key/value pair per layer, one for the s2 head
    alive = est.phase in ("prefill", "sample") or (est.phase == "recompute" and ragged)
    peak = est.weights + est.inputs + est.transient
    return InferencePlan(
        batch, lookback, horizon, sample_count, precision, sliding, est.weights, est.inputs,
        est.caches - s2, s2, est.phase, alive, est.transient - (est.caches if alive else 0), peak,
        est.total,
    )


def max_infer_batch(
    budget_bytes: int, model_cfg: KronosConfig, tok_cfg: TokenizerConfig, lookback: int,
    horizon: int, **kwargs,
) -> int:
    return _largest(
        lambda b: (
            plan_inference(model_cfg, tok_cfg, lookback, horizon, b, **kwargs).total <= budget_bytes
        )
    )


def largest_batch(model, tokenizer, mode: str = "train", window: int = 512, precision: str = "fp32",
                  checkpointing: bool = False, device=None, budget_bytes: int | None = None) -> int:
    """Largest training micro-batch for live modules (``kronos train``'s ``batch_size: auto``).

    ``model``: a ``Kronos`` (predictor training) or its config; ``device``: a
    torch device whose free memory is the budget (CPU: available RAM), unless
    ``budget_bytes`` is given. Tokenizer training is not planned here (raises).
    """
    from kronos_core.model import KronosTokenizer

    if mode != "train":
        raise ValueError(f"largest_batch plans training only, got mode={mode!r}")
    if isinstance(model, (KronosTokenizer, TokenizerConfig)):
        raise NotImplementedError(
            "the planner models predictor training only; tokenizer training is not planned"
        )
    model_cfg = getattr(model, "config", model)
    tok_cfg = getattr(tokenizer, "config", tokenizer)
    if budget_bytes is None:
        budget_bytes = free_bytes(device)
    on_cuda = device is not None and str(device).startswith("cuda")
    return max_train_batch(budget_bytes, model_cfg, tok_cfg, window, precision, checkpointing,
                           foreach_optimizer=on_cuda)


def free_bytes(device=None) -> int:
    """Free memory of a torch device (CUDA: ``mem_get_info``; CPU: available RAM)."""
    if device is not None and str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def accumulation_for(batch: int, micro: int) -> int:
    return math.ceil(batch / micro) if micro > 0 else 0
