"""The typed seams of the service: what the gateway needs from the candle store and from
the predictor replicas, and what a replica needs from the engine.

Production classes satisfy these by structure (``KlineReader``, ``Predictor`` and the
Ingress's ``ServeReplicas``, ``KronosPredictor``); so do the fakes of the unit tests
(``tests/service/service_fakes.py``), and ``tests/service/test_interfaces.py`` checks both
sides with ``isinstance`` on these runtime-checkable protocols. The gateway therefore never
asks "does this object have ...?" at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import PriceLimitRule
from service.common.messages import ReplicaInfo, Shard, ShardResult


@runtime_checkable
class SymbolFailure(Protocol):
    """One symbol the store could not read (``kronos_core.data.store.SymbolError``).
    Members read-only (properties), so frozen dataclasses conform."""

    @property
    def symbol(self) -> str: ...

    @property
    def code(self) -> ErrorCode: ...

    @property
    def message(self) -> str: ...


@runtime_checkable
class SymbolWindowView(Protocol):
    """One symbol's unpadded window (``kronos_core.data.store.SymbolWindow``).
    Members read-only (properties), so frozen dataclasses conform."""

    @property
    def symbol(self) -> str: ...

    @property
    def values(self) -> np.ndarray: ...  # (L, 6) float32, FEATURES order

    @property
    def timestamps(self) -> np.ndarray: ...  # (L,) datetime64[ns], naive local wall clock

    @property
    # frequency, timezone, session_timezone, exchange, ...
    def metadata(self) -> dict[str, Any]: ...

    @property
    # the last stored candle (after timestamps[-1] when as_of cut)
    def last_stored(self) -> np.datetime64: ...

    @property
    def held(self) -> int | None: ...  # candles held at or before as_of (None: unknown)

    @property
    # the stamps the sessions are learned from without a calendar (None: it has one)
    def template_stamps(self) -> np.ndarray | None: ...


@runtime_checkable
class Windows(Protocol):
    """A batch read (``kronos_core.data.store.WindowBatch``): the windows of the symbols
    that succeeded, in request order, and the failures."""

    # read-only (properties): a batch holding lists of the concrete window and error types conforms
    @property
    def windows(self) -> Sequence[SymbolWindowView]: ...

    @property
    def errors(self) -> Sequence[SymbolFailure]: ...

    @property
    def store_version(self) -> int: ...  # the one store version every window was read from


@runtime_checkable
class CandleStore(Protocol):
    """The gateway's view of the store (``kronos_core.data.store_reader.KlineReader``)."""

    root: Any  # the store's folder: messages to clients name it by its base name only

    @property
    def version(self) -> int:
        """The published store version (0: an unversioned store); one stat to check."""
        ...

    def symbols(self, frequency: str | None = None) -> list[str]:
        """Sorted symbols (of one frequency, or of all)."""
        ...

    def read_windows(self, symbols: Sequence[str], lookback: int, as_of: Any = None,
                     frequency: str | None = None) -> Windows:
        """The last ``lookback`` candles at or before ``as_of`` of each symbol."""
        ...

    def metadata(self, symbol: str, frequency: str | None = None) -> dict[str, Any]:
        """The symbol's metadata; ``last`` is its last stored candle's time (text)."""
        ...


@runtime_checkable
class Replicas(Protocol):
    """The gateway's view of the predictor replicas (``service.replica.deployment.Predictor``,
    reached through ``service.serve_replicas.ServeReplicas``). ``forecast_shard`` raises
    ``service.common.errors.ReplicaGone`` when the replica died (the shard may be retried) and
    ``service.common.errors.Overloaded`` when the replicas' queues are full."""

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

    @property  # read-only, so the engine's own EngineStats conforms
    def stats(self) -> EngineStatsView: ...


@runtime_checkable
class ForecastJob(Protocol):
    """A forecast run one decode step at a time (``kronos_core.predictor.ForecastJob``): ``step()``
    until ``done``, then ``result()``; ``close()`` frees its engine state early (cancelled)."""

    rows: int  # series x sample paths

    @property  # read-only, so the engine's properties conform
    def done(self) -> bool: ...

    @property
    def steps_left(self) -> int: ...

    @property
    def shares_steps(self) -> bool:
        """Whether its next step may run in ``ForecastEngine.step_together`` with others."""
        ...

    def step(self) -> None: ...

    def close(self) -> None: ...

    def result(self) -> EngineResult: ...


@runtime_checkable
class ForecastEngine(Protocol):
    """A replica's view of the engine (``kronos_core.predictor.KronosPredictor``)."""

    # the model's kronos_core.loading.ModelIdentity (None when not built by the loader); a
    # calibration checks it before correcting paths
    identity: Any

    def start_forecast(self, series: Sequence[np.ndarray], x_timestamps: Sequence[Any],
                       y_timestamps: Sequence[Any], options: ForecastOptions, *,
                       series_keys: Sequence[int] | None = None,
                       price_limits: Sequence[PriceLimitRule | None] | None = None,
                       verbose: bool = False) -> ForecastJob:
        """A forecast of ``series`` with every option of the call in ``options``, not yet run:
        the replica's step loop steps it between other jobs' steps."""
        ...

    def step_together(self, jobs: Sequence[ForecastJob]) -> None:
        """One step of each of ``jobs`` (each ``shares_steps``) in one shared decode step; each
        job's result is what it gives stepped alone."""
        ...
