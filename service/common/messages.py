"""The plain data that crosses between the gateway and the predictor replicas (pickled by
Ray): a ``Shard`` goes out, a ``ShardResult`` with its ``BatchReport``s comes back, and
``ReplicaInfo`` is a replica's description of itself. No Ray, no torch, no logic beyond a
shard's token count; the gateway cuts shards (``service.gateway.shards``), the replica runs
them (``service.replica.step_runner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import PriceLimitRule
from kronos_core.calibration.policy import CalibrationDescription


def shard_tokens(lengths: Sequence[int], horizon: int, sample_count: int) -> int:
    """Tokens a shard of series of these ``lengths`` costs: sum_i sample_count * (L_i + horizon)."""
    return int(sum(sample_count * (int(n) + horizon) for n in lengths))


@dataclass
class Shard:
    """A contiguous slice of one request's series, sent to one replica."""

    request_id: str  # gateway-side id of the request
    index: int  # position of this shard in the request
    values: list[np.ndarray]  # per series (L_i, 6) float32, raw scale
    x_timestamps: list[np.ndarray]  # per series (L_i,) datetime64[ns]
    y_timestamps: list[np.ndarray]  # per series (H,) datetime64[ns]
    options: ForecastOptions  # the request's forecast options; calibration is None on the wire
    return_paths: bool = False  # ship (B, S, H, 6) paths back
    # apply the replica's calibration to the quantiles (the gateway checked it covers them)
    calibrate: bool = False
    # the member of a calibration fitted per group (None: not grouped)
    calibration_group: str | None = None
    tokens: int = 0  # sum_i sample_count * (L_i + H): the shard's share of a token budget
    # per series its daily price-limit rule (None: none); None: no limits for this shard
    price_limits: list[PriceLimitRule | None] | None = None

    def __post_init__(self) -> None:
        # a Calibration is the replica's, never shipped per shard
        if self.options.calibration is not None:
            raise ValueError(
                "Shard.options.calibration must be None: set calibrate=True for the replica's"
            )
        if not self.tokens:
            self.tokens = shard_tokens(
                [len(v) for v in self.values], self.options.horizon, self.options.sample_count
            )

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
    # the step scheduler's figures (service.replica.scheduler; zero for a batch run to completion)
    # per shard it admitted: seconds from arrival to start
    queue_wait_s: list[float] = field(default_factory=list)
    decode_steps: int = 0  # decode steps it ran
    step_rows: int = 0  # rows (series x samples) of each of those steps
    admitted_mid_batch: int = 0  # shards it admitted while another job was mid-decode
    shared_steps: int = 0  # of its decode steps, those shared with other jobs (continuous batching)


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
    # set with ``error``: forecast_failed or replica_unavailable
    error_code: ErrorCode | None = None
    # batches not yet reported to the gateway
    reports: list[BatchReport] = field(default_factory=list)
    # the adaptive calibration state applied (version, sha256, updated_at)
    calibration_state: dict[str, Any] | None = None


@dataclass
class ReplicaInfo:
    """What a predictor replica reports about itself (``Predictor.describe``)."""

    replica_id: str
    device: str
    budget_bytes: int  # device memory the batches of one step loop may use
    max_batch_tokens: int  # token budget of one coalesced batch
    max_context: int
    model_cfg: Any  # model.config dataclass, for the memory model
    tokenizer_cfg: Any
    model: dict[str, Any]  # ModelInfo fields (its "calibration" block is ``calibration.as_dict()``)
    # what the replica's calibration covers (None: none)
    calibration: CalibrationDescription | None = None
    # step loops that run batches side by side (a GPU: one; a CPU: one per core by default);
    # budget_bytes is each loop's
    step_loops: int = 1
    # the device's speed figures the gateway plans a request's time with
    # (``kronos_core.plan.roofline.Device``: a CPU measured by one of its loops, a GPU by name);
    # None: not known, no request is refused on its plan
    speed: Any = None
