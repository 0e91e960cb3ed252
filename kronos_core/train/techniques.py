"""Training techniques kept apart from the loop: checkpointing, precision, schedule, OOM, seeds."""

from __future__ import annotations

import contextlib
import math
import random

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def enable_block_checkpointing(blocks: nn.ModuleList) -> None:
    """Recompute each block's activations in the backward pass instead of storing them.

    Each block's ``forward`` is replaced on the instance (parameter names and the
    state dict do not change); in eval mode or under ``no_grad`` blocks run plainly.
    """
    for block in blocks:
        plain = type(block).forward

        def forward(*args, _block=block, _plain=plain, **kwargs):
            if _block.training and torch.is_grad_enabled():
                return checkpoint(_plain, _block, *args, use_reentrant=False, **kwargs)
            return _plain(_block, *args, **kwargs)

        block.forward = forward


def autocast_context(precision: str, device: torch.device):
    """Autocast for ``bf16``/``fp16`` (fp16 only on CUDA); a no-op context for ``fp32``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            "precision fp16 needs a CUDA device (it relies on a gradient scaler); use bf16 on CPU"
        )
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(precision: str, device: torch.device):
    """A GradScaler for fp16 on CUDA, else None."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier: linear warm-up over ``warmup`` steps, then cosine decay to ``min_ratio`` at
    ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw(module: nn.Module, lr: float, weight_decay: float, betas) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms, biases or 1-d weights)."""
    params = [p for p in module.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas))


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a CUDA OOM or a CPU allocation failure."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(exc, oom_type):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text
    )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every RNG the loop draws from, in a form ``torch.load(weights_only=True)`` accepts."""
    np_state = np.random.get_state()
    # numpy's global RandomState is an MT19937, whose legacy state is the 5-tuple (the stubs
    # also allow the dict other bit generators return)
    assert isinstance(np_state, tuple)
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
