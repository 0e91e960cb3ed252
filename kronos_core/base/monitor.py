"""``ResourceMonitor``: what a run used (CPU, RSS, GPU) and how fast it went.

Wrap any code::

    with ResourceMonitor() as m:
        for batch in loader:
            train_step(batch)
            m.step(n_samples=len(batch))
    m.report("run.json")

A background thread samples, every ``interval`` seconds, the process CPU %
and resident memory (psutil) and, where an NVIDIA GPU and ``nvidia-ml-py`` are
present, the GPU's utilisation and memory (NVML). On CUDA the report also holds
``torch.cuda.max_memory_allocated`` (the allocator's own peak). ``step`` counts
steps and samples so the summary gives samples/s and step time. The report
warns when the GPU was under 50% busy (the device waited: usually data
loading) or when host or GPU memory went over 90%.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psutil

GPU_BUSY_MIN = 50.0  # % mean utilisation below which the report warns of a data-loading bottleneck
MEMORY_HIGH = 90.0  # % of host or GPU memory above which the report warns


def load_nvml():
    """The ``pynvml`` module (package ``nvidia-ml-py``) initialised, or None when absent or no
    driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVMLError subclasses
        return None
    return pynvml


class ResourceMonitor:
    """Context manager sampling process and GPU resources in a background thread.

    ``nvml``: a pynvml-like module to use (tests pass a fake); default: load
    ``pynvml`` if installed and a driver answers. ``gpu_index``: the NVML device
    to watch (default: ``CUDA_VISIBLE_DEVICES``' first entry, else 0).
    ``gpu=False`` skips GPU sampling. ``max_samples``: the time series is
    thinned (every other sample dropped) when it would grow beyond this, so
    long runs keep a bounded report.
    """

    def __init__(self, interval: float = 0.5, nvml: Any = None, gpu_index: int | None = None,
                 label: str | None = None, max_samples: int = 2000, gpu: bool = True):
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.interval = interval
        self.label = label
        self.max_samples = max_samples
        # a pynvml-like module (duck-typed: the real one is untyped, tests pass a fake) or None
        self._nvml: Any = None if not gpu else nvml if nvml is not None else load_nvml()
        self._gpu: Any = None  # the NVML device handle while GPU sampling is on
        if self._nvml is not None:
            index = gpu_index if gpu_index is not None else _visible_gpu_index()
            try:
                self._gpu = self._nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                self._nvml = None
        self._proc = psutil.Process(os.getpid())
        self._host_total = psutil.virtual_memory().total
        self._samples: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None  # perf_counter at __enter__
        self._t1: float | None = None  # perf_counter at __exit__
        self._steps: list[float] = []  # seconds of each step
        self._last_step: float | None = None
        self._n_samples = 0
        self._cuda_peak: int | None = None
        self._stride = 1

    # ---- context manager -----------------------------------------------------------
    def __enter__(self) -> ResourceMonitor:
        self._proc.cpu_percent(None)  # prime: the first call always answers 0
        if _cuda_ready():
            import torch

            torch.cuda.reset_peak_memory_stats()
        self._t0 = self._last_step = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="resource-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()  # one last sample at the end
        self._t1 = time.perf_counter()
        if _cuda_ready():
            import torch

            self._cuda_peak = int(torch.cuda.max_memory_allocated())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        # only __enter__'s thread and __exit__ sample
        assert self._t0 is not None, "sampled before __enter__"
        row: dict[str, float | int | None] = {
            "t": round(time.perf_counter() - self._t0, 4),
            "cpu_percent": self._proc.cpu_percent(None),
            "rss_bytes": self._proc.memory_info().rss,
        }
        if self._gpu is not None:
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._gpu)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(self._gpu)
                row.update(gpu_util_percent=float(util.gpu), gpu_mem_used_bytes=int(mem.used),
                           gpu_mem_total_bytes=int(mem.total))
            except Exception:  # a GPU that stops answering ends GPU sampling, not the run
                self._gpu = None
        if _cuda_ready():
            import torch

            row["cuda_allocated_bytes"] = int(torch.cuda.memory_allocated())
        with self._lock:
            self._samples.append(row)
            if len(self._samples) > self.max_samples:
                self._samples = self._samples[::2]
                self._stride *= 2

    # ---- counting --------------------------------------------------------------------
    def step(self, n_samples: int = 0) -> None:
        """Mark the end of one step (optimizer step, batch, request) that processed
        ``n_samples``."""
        now = time.perf_counter()
        if self._last_step is not None:
            self._steps.append(now - self._last_step)
        self._last_step = now
        self._n_samples += int(n_samples)

    # ---- results ---------------------------------------------------------------------
    @property
    def samples(self) -> list[dict]:
        with self._lock:
            return list(self._samples)

    def summary(self) -> dict[str, Any]:
        """Peaks, means, throughput and step time over the samples taken so far."""
        rows = self.samples
        end = self._t1 if self._t1 is not None else time.perf_counter()
        seconds = end - self._t0 if self._t0 is not None else 0.0
        out: dict[str, Any] = {
            "seconds": seconds,
            "n_timeseries_samples": len(rows),
            "steps": len(self._steps),
            "samples": self._n_samples,
            "samples_per_s": self._n_samples / seconds if seconds > 0 and self._n_samples else None,
            "step_time_mean_s": statistics.fmean(self._steps) if self._steps else None,
            "step_time_median_s": statistics.median(self._steps) if self._steps else None,
            "host_memory_total_bytes": self._host_total,
            "cuda_max_memory_allocated_bytes": self._cuda_peak,
        }
        for key in ("cpu_percent", "rss_bytes", "gpu_util_percent", "gpu_mem_used_bytes"):
            values = [r[key] for r in rows if r.get(key) is not None]
            out[f"{key}_peak"] = max(values) if values else None
            out[f"{key}_mean"] = statistics.fmean(values) if values else None
        totals = [r["gpu_mem_total_bytes"] for r in rows if r.get("gpu_mem_total_bytes")]
        out["gpu_mem_total_bytes"] = totals[-1] if totals else None
        return out

    def warnings(self, summary: dict | None = None) -> list[str]:
        s = summary or self.summary()
        notes = []
        if s["gpu_util_percent_mean"] is not None and s["gpu_util_percent_mean"] < GPU_BUSY_MIN:
            notes.append(
                f"GPU busy only {s['gpu_util_percent_mean']:.0f}% of the time on average (< "
                f"{GPU_BUSY_MIN:.0f}%): the device waits, usually on data loading; raise "
                "DataLoader num_workers, prefetch, or the batch size"
            )
        if (
            s["rss_bytes_peak"] is not None
            and s["rss_bytes_peak"] > MEMORY_HIGH / 100 * self._host_total
        ):
            notes.append(
                f"host memory peaked at {100 * s['rss_bytes_peak'] / self._host_total:.0f}% of RAM "
                f"(> {MEMORY_HIGH:.0f}%): lower the batch size or window"
            )
        if s["gpu_mem_used_bytes_peak"] is not None and s["gpu_mem_total_bytes"]:
            share = 100 * s["gpu_mem_used_bytes_peak"] / s["gpu_mem_total_bytes"]
            if share > MEMORY_HIGH:
                notes.append(f"GPU memory peaked at {share:.0f}% (> {MEMORY_HIGH:.0f}%): close to"
                             " out-of-memory; lower the batch size or turn on checkpointing")
        return notes

    def as_dict(self) -> dict[str, Any]:
        summary = self.summary()
        return {
            "label": self.label,
            "interval_s": self.interval * self._stride,
            "gpu_sampled": any("gpu_util_percent" in r for r in self.samples),
            "summary": summary,
            "warnings": self.warnings(summary),
            "timeseries": self.samples,
        }

    def report(self, path: str | Path | None = None) -> dict[str, Any]:
        """The report as a dict; also written as JSON to ``path`` when given."""
        data = self.as_dict()
        if path is not None:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2))
        return data


def _visible_gpu_index() -> int:
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _cuda_ready() -> bool:
    """True when torch is imported and CUDA is initialised (never imports torch itself)."""
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())
