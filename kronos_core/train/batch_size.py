"""``batch_size: auto``: the largest batch the memory planner says fits, or a simple estimate.

The planner (``kronos_core.plan.planner``) is imported lazily; when it is absent
or does not answer, ``fallback_batch_size`` estimates activation memory per
sample from the model's sizes and takes half of the free memory as budget.
"""

from __future__ import annotations

import logging

import torch

from kronos_core.model import Kronos, KronosTokenizer

log = logging.getLogger(__name__)

MAX_AUTO_BATCH = 256


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # Linux without psutil
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return 2**31


def activation_bytes_per_sample(kind: str, model: Kronos, tok: KronosTokenizer, window: int,
                                precision: str, checkpointing: bool) -> int:
    """A rough training-activation estimate for one window (bytes), used only without the
    planner."""
    elem = 2 if precision in ("bf16", "fp16") else 4
    if kind == "tokenizer":
        c = tok.config
        layers, d, ff = c.n_enc_layers + 2 * c.n_dec_layers, c.d_model, c.ff_dim
        vocab = 0
    else:
        c = model.config
        layers, d, ff = c.n_layers + 1, c.d_model, c.ff_dim
        vocab = 2**c.s1_bits + 2**c.s2_bits
    per_block = window * (10 * d + 3 * ff) * elem  # q/k/v/attn out, norms, residuals, SwiGLU
    kept = 1 if checkpointing else layers
    logits = window * vocab * 4 * 3  # fp32 logits, softmax and gradient
    return kept * per_block + (layers * window * d * elem if checkpointing else 0) + logits


def fallback_batch_size(kind, model, tok, window, precision, checkpointing, device) -> int:
    per_sample = activation_bytes_per_sample(kind, model, tok, window, precision, checkpointing)
    budget = free_memory_bytes(device) // 2
    batch = 1
    while batch * 2 * per_sample <= budget and batch * 2 <= MAX_AUTO_BATCH:
        batch *= 2
    return batch


def auto_batch_size(kind: str, model: Kronos, tok: KronosTokenizer, window: int, precision: str,
                    checkpointing: bool, device: torch.device) -> int:
    """The largest batch that fits on ``device`` (planner first, estimate otherwise)."""
    try:
        from kronos_core.plan import planner
    except ImportError:
        fit = None
    else:
        fit = getattr(planner, "largest_batch", None)
    if fit is not None:
        try:
            batch = int(
                fit(
                    model=model if kind == "predictor" else tok, tokenizer=tok, mode="train",
                    window=window, precision=precision, checkpointing=checkpointing, device=device,
                )
            )
            if batch >= 1:
                log.info("batch_size auto: the planner says %d fits", batch)
                return min(batch, MAX_AUTO_BATCH)
        except Exception as exc:  # the planner is advisory; never fail a run on it
            log.warning("planner could not size the batch (%s); using the estimate", exc)
    batch = fallback_batch_size(kind, model, tok, window, precision, checkpointing, device)
    log.info("batch_size auto: %d (estimate from free memory)", batch)
    return batch
