"""A compiled CPU kernel of causal self-attention (C++, AVX2 + FMA): ``layers.causal_attention``.

``native_attention.cc`` is built with the machine's C++ compiler at the first call in a process
(about two seconds), kept in a cache folder under a name that hashes the source, the compiler and
its flags, and loaded with ctypes; later processes load the built file. torch's fused CPU kernel
scores every key of a query block and masks the later ones; this one scores only the keys a
block of 4 queries may see, so a 251-long prefill costs about half: 2.2 against 3.8 ms for 8
series x 4 heads at head size 32, 1.3 against 2.6 ms at 16 (docs/results/engine-profile.md).
The numbers are the attention's but for rounding (its exp is a polynomial within 2 float32 ulps).

``causal_attention`` returns None wherever the kernel does not run, and the caller uses torch's:
not an x86-64 CPU with AVX2 and FMA, no C++ compiler, a build or load that failed (logged once,
then off in the process), ``KRONOS_NATIVE_ATTENTION=0``, more than one torch thread (the kernel
runs on one: a CPU replica's step loops each run one; torch's kernel spreads over more), or
inputs it does not take (not float32 on a CPU, a head size other than 16, 32 or 64, a gradient
to track, a last dimension not contiguous).
``KRONOS_NATIVE_CACHE`` names the cache folder (default ``~/.cache/kronos/native``).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

ENV = "KRONOS_NATIVE_ATTENTION"  # "0": torch's kernels only
CACHE_ENV = "KRONOS_NATIVE_CACHE"
HEAD_SIZES = (16, 32, 64)
SOURCE = Path(__file__).with_name("native_attention.cc")
FLAGS = ("-O3", "-mavx2", "-mfma", "-std=c++17", "-shared", "-fPIC")
CPU_FLAGS = ("avx2", "fma")
BUILD_TIMEOUT_S = 120

log = logging.getLogger(__name__)


class _State:
    """The loaded library, or why there is none (once decided, for the process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.library: ctypes.CDLL | None = None
        self.off_because: str | None = None


_state = _State()


class Unavailable(RuntimeError):
    """The kernel cannot run on this machine (not a failure: torch's kernels serve)."""


def available() -> bool:
    """Whether the kernel runs in this process (building it on the first call)."""
    return why_not() is None


def why_not() -> str | None:
    """Why the kernel does not run here, or None where it does (building it on the first call)."""
    if os.environ.get(ENV, "1").strip() == "0":
        return f"{ENV}=0"
    _library()
    return _state.off_because


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """q, k, v (B, H, L, D) -> causal attention (B, H, L, D), a view of a (B, L, H, D) buffer;
    None where the kernel does not run (see the module docstring)."""
    if not (_takes(q, k, v) and q.dim() == 4 and q.shape == k.shape == v.shape):
        return None
    library = _library()
    if library is None:
        return None
    b, heads, length, head_dim = q.shape
    out = q.new_empty(b, length, heads, head_dim)  # (B, L, H, D)
    view = out.transpose(1, 2)  # (B, H, L, D)
    strides = [(ctypes.c_int64 * 3)(*t.stride()[:3]) for t in (q, k, v, view)]
    status = library.kronos_causal_attention(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), b, heads, length, head_dim,
        *strides, head_dim**-0.5,
    )
    if status != 0:  # a shape the kernel refused: _takes should have said so
        raise RuntimeError(f"native causal attention refused {tuple(q.shape)} (status {status})")
    return view


def _takes(*tensors: torch.Tensor) -> bool:
    """Whether the kernel takes these tensors: float32 on a CPU, last dimension contiguous, head
    size 16, 32 or 64, no gradient to track, one torch thread (the kernel runs on one; with more,
    torch's kernel spreads over them), and the kernel not switched off."""
    if os.environ.get(ENV, "1").strip() == "0" or torch.get_num_threads() != 1:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(-1) == 1
               for t in tensors) and tensors[0].shape[-1] in HEAD_SIZES


def _library() -> ctypes.CDLL | None:
    if _state.library is not None or _state.off_because is not None:
        return _state.library
    with _state.lock:
        if _state.library is None and _state.off_because is None:
            try:
                _state.library = _load(_build())
            except Unavailable as reason:
                _state.off_because = str(reason)
                log.info("native causal attention not used: %s", reason)
            except Exception as error:  # a failed build or load: torch's kernels serve
                _state.off_because = f"{type(error).__name__}: {error}"
                log.warning("native causal attention is off in this process (%s); torch's "
                            "kernel runs, with the same numbers but for rounding, slower",
                            _state.off_because)
    return _state.library


def _build() -> Path:
    """The built library's path: from the cache, or compiled into it now."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise Unavailable(f"not an x86-64 CPU ({platform.machine()})")
    missing = [flag for flag in CPU_FLAGS if flag not in _cpu_flags()]
    if missing:
        raise Unavailable(f"the CPU lacks {', '.join(missing)}")
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise Unavailable("no C++ compiler (c++, g++ or $CXX)")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, compiler.encode(), " ".join(FLAGS).encode()]))
    folder = _cache_folder()
    target = folder / f"native_attention-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    # built beside the target and renamed into place, so a process never loads a partial file
    fd, partial = tempfile.mkstemp(dir=folder, prefix=target.name, suffix=".partial")
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", partial],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _load(path: Path) -> ctypes.CDLL:
    library = ctypes.CDLL(str(path))
    fn = library.kronos_causal_attention
    pointer, count, strides = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)
    fn.argtypes = [pointer] * 4 + [count] * 4 + [strides] * 4 + [ctypes.c_float]
    fn.restype = ctypes.c_int
    return library


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _cache_folder() -> Path:
    """``KRONOS_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/kronos/native`` or ``~/.cache/kronos/
    native``; a private temporary folder where that cannot be written."""
    configured = os.environ.get(CACHE_ENV)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(configured) if configured else Path(base) / "kronos" / "native"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"kronos-native-{os.getuid()}"
    fallback.mkdir(mode=0o700, exist_ok=True)
    return fallback
