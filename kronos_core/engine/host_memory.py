"""The C allocator's settings for a CPU engine: freed blocks stay in the process for reuse.

glibc's ``malloc`` serves a block over its mmap threshold (128 KiB at first, raised as such
blocks are freed) with a fresh ``mmap`` and returns it to the system on ``free``; it also gives
the heap's free top back once it passes 128 KiB. A CPU forecast allocates and frees tensors of
0.1-10 MB many times a step (a 256-row decode step's logits are 1 MB, a prefill's q/k 2 MB), so
each such tensor is first written through page faults of zeroed pages: on this project's 2-core
machine a rotary pass over a prefill's q and k took 5.0 ms that way against 0.47 ms with the
settings below (docs/results/engine-profile.md). ``keep_freed_memory`` fixes the mmap threshold
at glibc's 64-bit maximum (32 MiB) and the trim threshold at 1 GiB, so those tensors reuse heap
memory. The price: a process holds on to up to 1 GiB of freed heap (a CPU replica's peak, which
it reaches again on the next request anyway).

Set ``KRONOS_MALLOC_TUNING=0`` to leave the allocator as the process found it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

ENV = "KRONOS_MALLOC_TUNING"
M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30

_applied: bool | None = None  # None: not tried in this process


def keep_freed_memory() -> bool:
    """Apply the settings once per process (later calls return the first answer): True when
    glibc took both, False on another C library, with ``KRONOS_MALLOC_TUNING=0``, or when
    glibc refused one (logged)."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(ENV, "1").strip() == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    for param, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if mallopt(param, value) != 1:
            log.warning("mallopt(%d, %d) refused: the allocator keeps its defaults", param, value)
            return False
    return True
