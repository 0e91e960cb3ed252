"""Memory on the replica's device: recognising an out-of-memory error (the step runner halves
the job that raised it), the device's memory figures for the batch reports, and the memory
model's per-job estimate that the step scheduler admits by."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Any

from kronos_core.base.options import ForecastOptions

# (options, lengths) -> (resident, transient)
MemoryModel = Callable[[ForecastOptions, list[int]], tuple[int, int]]

# torch raises no dedicated type when the CPU allocator fails: ``torch.empty(2**62)`` on CPU gives a
# plain RuntimeError "[enforce fail at alloc_cpu.cpp:...] ... DefaultCPUAllocator: can't allocate
# memory: you tried to allocate N bytes". Matching that allocator message is the only way to tell it
# from other RuntimeErrors (shape bugs must not be retried in halves). CUDA has its own type.
_OOM_MESSAGES = ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a device allocation failure: torch.OutOfMemoryError (CUDA; the same class as
    torch.cuda.OutOfMemoryError), or the CPU allocator's plain RuntimeError, recognised by its
    message (see ``_OOM_MESSAGES``)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MESSAGES)


def device_memory(device: str) -> tuple[int, int, int]:
    """(allocated, reserved, peak) bytes. On CPU: process RSS, RSS, peak RSS."""
    if device.startswith("cuda"):
        import torch

        return (
            int(torch.cuda.memory_allocated(device)),
            int(torch.cuda.memory_reserved(device)),
            int(torch.cuda.max_memory_allocated(device)),
        )
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - non-Linux
        rss = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss, rss, max(peak, rss)


def memory_model_for(
    model_cfg: Any, tokenizer_cfg: Any, max_context: int, sliding: str
) -> MemoryModel:
    """The memory model's (resident, transient) bytes of one job: what it holds while admitted
    (inputs
    and key/value caches) and what one of its steps adds; weights are the replica's, counted
    once."""
    from kronos_core.engine.memory import SAFETY, memory_breakdown

    def estimate(options: ForecastOptions, lengths: list[int]) -> tuple[int, int]:
        est = memory_breakdown(
            model_cfg,
            tokenizer_cfg,
            len(lengths),
            max(lengths),
            options.horizon,
            options.sample_count,
            max_context=max_context,
            include_weights=False,
            sliding=options.sliding or sliding,
        )
        resident = est.inputs + est.caches
        return int(resident * SAFETY), int(max(0, est.transient - est.caches) * SAFETY)

    return estimate
