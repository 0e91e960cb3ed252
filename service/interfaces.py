"""The typed seams of the service: what the gateway needs from the candle store and from
the predictor replicas, and what a replica needs from the engine.

Production classes satisfy these by structure (``KlineStore``, ``Predictor`` and the
Ingress's ``ServeReplicas``, ``KronosPredictor``); so do the fakes of the unit tests
(``tests/service/service_fakes.py``), and ``tests/service/test_interfaces.py`` checks both
sides with ``isinstance`` on these runtime-checkable protocols. The gateway therefore never
asks "does this object have ...?" at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kronos_core.errors import ErrorCode
from service.messages import ReplicaInfo, Shard, ShardResult


@runtime_checkable
class SymbolFailure(Protocol):
    """One symbol the store could not read (``kronos_core.data.store.SymbolError``)."""

    symbol: str
    code: ErrorCode
    message: str


@runtime_checkable
class SymbolWindowView(Protocol):
    """One symbol's unpadded window (``kronos_core.data.store.SymbolWindow``)."""

    symbol: str
    values: np.ndarray  # (L, 6) float32, FEATURES order
    timestamps: np.ndarray  # (L,) datetime64[ns], naive local wall clock
    metadata: dict  # frequency, timezone, session_timezone, exchange, ...
    last_stored: np.datetime64  # the last stored candle (after timestamps[-1] when as_of cut)


@runtime_checkable
class Windows(Protocol):
    """A batch read (``kronos_core.data.store.WindowBatch``): the windows of the symbols
    that succeeded, in request order, and the failures."""

    windows: Sequence[SymbolWindowView]
    errors: Sequence[SymbolFailure]


@runtime_checkable
class CandleStore(Protocol):
    """The gateway's view of the store (``kronos_core.data.store.KlineStore``)."""

    root: Any  # the store's folder: messages to clients name it by its base name only

    def symbols(self, frequency: str | None = None) -> list[str]:
        """Sorted symbols (of one frequency, or of all)."""
        ...

    def read_windows(self, symbols: Sequence[str], lookback: int, as_of: Any = None,
                     frequency: str | None = None) -> Windows:
        """The last ``lookback`` candles at or before ``as_of`` of each symbol."""
        ...

    def metadata(self, symbol: str, frequency: str | None = None) -> dict:
        """The symbol's metadata; ``last`` is its last stored candle's time (text)."""
        ...


@runtime_checkable
class Replicas(Protocol):
    """The gateway's view of the predictor replicas (``service.replica.Predictor``, reached
    through ``service.serve_replicas.ServeReplicas``). ``forecast_shard`` raises
    ``service.errors.ReplicaGone`` when the replica died (the shard may be retried) and
    ``service.errors.Overloaded`` when the replicas' queues are full."""

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        ...

    async def describe(self) -> ReplicaInfo:
        ...


@runtime_checkable
class EngineStatsView(Protocol):
    tokens_generated: int


@runtime_checkable
class EngineResult(Protocol):
    """What ``KronosPredictor.forecast`` returns (``kronos_core.predictor.ForecastResult``)."""

    paths: np.ndarray  # (B, S, H, 6)
    mean: np.ndarray  # (B, H, 6)
    quantiles: np.ndarray  # (Q, B, H, 6)
    stats: EngineStatsView


@runtime_checkable
class ForecastEngine(Protocol):
    """A replica's view of the engine (``kronos_core.predictor.KronosPredictor``)."""

    def forecast(self, series: Sequence[np.ndarray], x_timestamps: Sequence, y_timestamps: Sequence,
                 horizon: int, sample_count: int = 1, T: float = 1.0, top_k: int = 0, top_p: float = 0.9,
                 seed: int | None = None, quantiles: Sequence[float] = (),
                 repair: bool | None = None) -> EngineResult:
        ...
