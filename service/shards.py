"""Plain data passed between the gateway and the predictor replicas, and the logic on both
sides that needs no Ray: shard planning (gateway) and batch execution with OOM splitting
(replica). Unit-tested with factory helpers and a fake predictor.
"""

from __future__ import annotations

import logging
import math
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kronos_core.errors import ErrorCode
from kronos_core.options import ForecastOptions

if TYPE_CHECKING:
    from service.interfaces import ForecastEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingKey:
    """Everything that must be equal for two shards to share one engine call."""

    horizon: int  # candles to forecast
    sample_count: int  # sample paths per series
    temperature: float  # softmax temperature (engine's T)
    top_k: int  # 0: off
    top_p: float  # nucleus mass
    seed: int | None  # None: unseeded
    quantiles: tuple[float, ...]  # levels the engine computes, sorted
    return_paths: bool  # ship (B, S, H, 6) paths back
    repair: bool = False  # make forecast candles consistent (high/low, volume >= 0)
    calibrate: bool = False  # apply the replica's calibration to the quantiles (the gateway checked it covers them)

    def options(self, calibration: Any = None) -> ForecastOptions:
        """The engine's options for this key; ``calibration`` (the replica's) is used only when
        the key asks to calibrate."""
        return ForecastOptions(
            horizon=self.horizon, sample_count=self.sample_count, temperature=self.temperature,
            top_k=self.top_k, top_p=self.top_p, seed=self.seed, quantiles=self.quantiles, repair=self.repair,
            calibration=calibration if self.calibrate else None,
        )


@dataclass
class Shard:
    """A contiguous slice of one request's series, sent to one replica."""

    request_id: str  # gateway-side id of the request
    index: int  # position of this shard in the request
    values: list[np.ndarray]  # per series (L_i, 6) float32, raw scale
    x_timestamps: list[np.ndarray]  # per series (L_i,) datetime64[ns]
    y_timestamps: list[np.ndarray]  # per series (H,) datetime64[ns]
    key: SamplingKey  # sampling options, shared by the whole request
    tokens: int = 0  # sum_i sample_count * (L_i + H): the shard's share of a token budget

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = shard_tokens([len(v) for v in self.values], self.key.horizon, self.key.sample_count)

    @property
    def size(self) -> int:
        return len(self.values)


@dataclass
class BatchReport:
    """One device batch run by a replica; recorded once by the gateway's metrics."""

    replica_id: str  # Serve replica id
    device: str  # "cpu", "cuda:0", ...
    series: int  # series in the batch
    shards: int  # shards coalesced into it
    engine_calls: int  # forecast() calls it took (> groups when OOM split it)
    oom_splits: int  # times an OOM halved a sub-batch
    tokens_generated: int  # from EngineStats
    seconds: float  # wall time of the batch
    queue_depth: int  # shards waiting at the replica when the batch started
    mem_allocated: int  # bytes, after the batch
    mem_reserved: int  # bytes, after the batch
    mem_peak: int  # bytes, since the replica started


@dataclass
class ShardResult:
    """A replica's answer for one shard; arrays are raw scale, float32."""

    request_id: str
    index: int
    replica_id: str
    mean: np.ndarray | None  # (B, H, 6)
    quantiles: np.ndarray | None  # (Q, B, H, 6)
    paths: np.ndarray | None  # (B, S, H, 6) when return_paths
    error: str | None = None  # the whole shard failed: message
    error_code: ErrorCode | None = None  # set with ``error``: forecast_failed or replica_unavailable
    reports: list[BatchReport] = field(default_factory=list)  # batches not yet reported to the gateway


@dataclass
class ReplicaInfo:
    """What a predictor replica reports about itself (``Predictor.describe``)."""

    replica_id: str
    device: str
    budget_bytes: int  # device memory one batch may use
    max_batch_tokens: int  # token budget of one coalesced batch
    max_context: int
    model_cfg: Any  # model.config dataclass, for the memory model
    tokenizer_cfg: Any
    model: dict  # ModelInfo fields


def shard_tokens(lengths: Sequence[int], horizon: int, sample_count: int) -> int:
    return int(sum(sample_count * (int(n) + horizon) for n in lengths))


class TooLargeError(ValueError):
    """One series of this lookback/horizon/sample_count does not fit the replica budget."""


def plan_shards(
    lengths: Sequence[int],
    horizon: int,
    sample_count: int,
    fit: Callable[[int], int],
    num_replicas: int,
    shards_per_replica: int = 2,
    max_batch_tokens: int | None = None,
) -> list[slice]:
    """Contiguous slices of the request's series, in order.

    ``fit(lookback)`` is the engine memory model's number of series that fit one replica's
    budget for this horizon and sample count. Shards are at most that size and at most the
    token budget, and small enough that every replica gets ``shards_per_replica`` of them.
    """
    n = len(lengths)
    if n == 0:
        return []
    longest = max(int(x) for x in lengths)
    cap = int(fit(longest))
    if cap <= 0:
        raise TooLargeError(
            f"a single series with lookback={longest}, horizon={horizon}, sample_count={sample_count} "
            "does not fit one replica's device budget"
        )
    if max_batch_tokens:
        per_series = sample_count * (longest + horizon)
        tok_cap = max_batch_tokens // per_series
        if tok_cap <= 0:
            raise TooLargeError(
                f"one series needs {per_series} tokens (sample_count x (lookback + horizon)), "
                f"more than the batch token budget {max_batch_tokens}"
            )
        cap = min(cap, tok_cap)
    target = math.ceil(n / max(1, num_replicas * shards_per_replica))
    size = max(1, min(cap, target))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


# --------------------------------------------------------------------------- replica side

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
    """Runs coalesced shards through ``predictor.forecast``: groups by sampling options,
    splits a sub-batch in half on out-of-memory and retries, slices results per shard."""

    def __init__(self, predictor: ForecastEngine, replica_id: str, device: str, min_split: int = 1):
        self.predictor = predictor
        self.replica_id = replica_id
        self.device = device
        self.min_split = min_split
        self.calibration = None  # kronos_core.eval.calibration.Calibration for this model, when configured

    def _forecast(self, values, xts, yts, key: SamplingKey, splits: list[int], calls: list[int]):
        """Returns (mean, quantiles, paths, tokens) for the given series, splitting on OOM."""
        try:
            calls[0] += 1
            res = self.predictor.forecast(values, xts, yts, key.options(self.calibration))
            tokens = int(res.stats.tokens_generated)
            q = np.asarray(res.quantiles, dtype=np.float32) if key.quantiles else None
            paths = np.asarray(res.paths, dtype=np.float32) if key.return_paths else None
            return np.asarray(res.mean, dtype=np.float32), q, paths, tokens
        except Exception as exc:
            n = len(values)
            if n <= self.min_split or not is_out_of_memory(exc):
                raise
            splits[0] += 1
            log.warning("replica %s: out of memory on %d series, splitting in half", self.replica_id, n)
            self._empty_cache()
            h = n // 2
            a = self._forecast(values[:h], xts[:h], yts[:h], key, splits, calls)
            b = self._forecast(values[h:], xts[h:], yts[h:], key, splits, calls)
            return (
                np.concatenate([a[0], b[0]], axis=0),
                None if a[1] is None else np.concatenate([a[1], b[1]], axis=1),
                None if a[2] is None else np.concatenate([a[2], b[2]], axis=0),
                a[3] + b[3],
            )

    def _empty_cache(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def run(self, shards: list[Shard], queue_depth: int = 0) -> tuple[list[ShardResult], BatchReport]:
        t0 = time.perf_counter()
        results: list[ShardResult | None] = [None] * len(shards)
        groups: dict[SamplingKey, list[int]] = {}
        for i, s in enumerate(shards):
            groups.setdefault(s.key, []).append(i)
        splits, calls, tokens = [0], [0], 0
        for key, idx in groups.items():
            values = [v for i in idx for v in shards[i].values]
            xts = [v for i in idx for v in shards[i].x_timestamps]
            yts = [v for i in idx for v in shards[i].y_timestamps]
            try:
                mean, q, paths, tok = self._forecast(values, xts, yts, key, splits, calls)
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
                    None if paths is None else paths[start:end],
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
