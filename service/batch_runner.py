"""The replica's batch execution, without Ray: coalesced shards go through the engine in as
few calls as their options allow, a sub-batch is halved and retried on out-of-memory, and
the results are sliced back per shard. Unit-tested with a fake engine.
"""

from __future__ import annotations

import logging
import os
import resource
import time

import numpy as np

from kronos_core.errors import ErrorCode
from kronos_core.options import ForecastOptions
from service.interfaces import ForecastEngine
from service.messages import BatchReport, Shard, ShardResult

log = logging.getLogger(__name__)

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


class BatchRunner:
    """Runs coalesced shards through ``predictor.forecast``: groups them by (options,
    calibrate), splits a sub-batch in half on out-of-memory and retries, slices results per
    shard (paths only to the shards that asked for them)."""

    def __init__(self, predictor: ForecastEngine, replica_id: str, device: str, min_split: int = 1):
        self.predictor = predictor
        self.replica_id = replica_id
        self.device = device
        self.min_split = min_split
        self.calibration = None  # kronos_core.eval.calibration.Calibration for this model, when configured

    def _engine(self, values, xts, yts, options: ForecastOptions):
        """The one engine call: (mean (B, H, 6), quantiles (Q, B, H, 6) or None, paths (B, S, H, 6), tokens)."""
        o = options
        res = self.predictor.forecast(
            values, xts, yts, o.horizon,
            sample_count=o.sample_count, T=o.temperature, top_k=o.top_k, top_p=o.top_p,
            seed=o.seed, quantiles=o.quantiles, repair=o.repair, sliding=o.sliding, calibration=o.calibration,
        )
        q = np.asarray(res.quantiles, dtype=np.float32) if o.quantiles else None
        paths = np.asarray(res.paths, dtype=np.float32)
        return np.asarray(res.mean, dtype=np.float32), q, paths, int(res.stats.tokens_generated)

    def _forecast(self, values, xts, yts, options: ForecastOptions, splits: list[int], calls: list[int]):
        """``_engine``'s answer for the given series, splitting on OOM."""
        try:
            calls[0] += 1
            return self._engine(values, xts, yts, options)
        except Exception as exc:
            n = len(values)
            if n <= self.min_split or not is_out_of_memory(exc):
                raise
            splits[0] += 1
            log.warning("replica %s: out of memory on %d series, splitting in half", self.replica_id, n)
            self._empty_cache()
            h = n // 2
            a = self._forecast(values[:h], xts[:h], yts[:h], options, splits, calls)
            b = self._forecast(values[h:], xts[h:], yts[h:], options, splits, calls)
            return (
                np.concatenate([a[0], b[0]], axis=0),
                None if a[1] is None else np.concatenate([a[1], b[1]], axis=1),
                np.concatenate([a[2], b[2]], axis=0),
                a[3] + b[3],
            )

    def _empty_cache(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _options(self, options: ForecastOptions, calibrate: bool) -> ForecastOptions:
        """The shard's options with this replica's calibration when the shard asks for it."""
        return options.with_(calibration=self.calibration) if calibrate and self.calibration is not None else options

    def run(self, shards: list[Shard], queue_depth: int = 0) -> tuple[list[ShardResult], BatchReport]:
        t0 = time.perf_counter()
        results: list[ShardResult | None] = [None] * len(shards)
        groups: dict[tuple[ForecastOptions, bool], list[int]] = {}
        for i, s in enumerate(shards):
            groups.setdefault((s.options, s.calibrate), []).append(i)
        splits, calls, tokens = [0], [0], 0
        for (options, calibrate), idx in groups.items():
            values = [v for i in idx for v in shards[i].values]
            xts = [v for i in idx for v in shards[i].x_timestamps]
            yts = [v for i in idx for v in shards[i].y_timestamps]
            try:
                mean, q, paths, tok = self._forecast(values, xts, yts, self._options(options, calibrate), splits, calls)
                tokens += tok
            except Exception as exc:  # one group's failure must not fail other requests' shards
                log.exception("replica %s: forecast failed for %d series", self.replica_id, len(values))
                msg = f"{type(exc).__name__}: {exc}"
                for i in idx:
                    s = shards[i]
                    results[i] = ShardResult(s.request_id, s.index, self.replica_id, None, None, None,
                                             error=msg, error_code=ErrorCode.FORECAST_FAILED)
                continue
            start = 0
            for i in idx:
                s = shards[i]
                end = start + s.size
                results[i] = ShardResult(
                    s.request_id, s.index, self.replica_id,
                    mean[start:end],
                    None if q is None else q[:, start:end],
                    paths[start:end] if s.return_paths else None,
                )
                start = end
        alloc, reserved, peak = device_memory(self.device)
        report = BatchReport(
            replica_id=self.replica_id, device=self.device,
            series=sum(s.size for s in shards), shards=len(shards), engine_calls=calls[0],
            oom_splits=splits[0], tokens_generated=tokens, seconds=time.perf_counter() - t0,
            queue_depth=queue_depth, mem_allocated=alloc, mem_reserved=reserved, mem_peak=peak,
        )
        return [r for r in results if r is not None], report
