"""The gateway: one portfolio request -> store windows -> memory-sized shards -> replicas
-> forecasts in request order. No Ray and no FastAPI here: the store and the replicas are
injected objects typed by ``service.interfaces`` (``CandleStore``, ``Replicas``), so the
whole flow is unit-testable with the fakes of ``tests/service/service_fakes.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from kronos_core.errors import ErrorCode, WarningCode
from service.interfaces import CandleStore, Replicas
from service.metrics import Metrics
from service.schemas import FEATURE_NAMES, ForecastRequest, InlineSeries
from service.settings import Settings
from service.shards import ReplicaInfo, SamplingKey, Shard, ShardResult, TooLargeError, plan_shards

log = logging.getLogger(__name__)


class Overloaded(Exception):
    """Too much work queued: answer 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int = 1, status_code: int = 503):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status_code = status_code


class DeadlineExceeded(Exception):
    """The request ran past its deadline (504); its pending shards were cancelled."""


class ReplicaGone(Exception):
    """The replica running a shard died or is unreachable: the shard may be retried."""


class RequestInvalid(Exception):
    """A request the service cannot run as asked (422); ``field`` names the culprit."""

    def __init__(self, field: str, message: str, details: list[tuple[list, str]] | None = None):
        super().__init__(message)
        self.field = field
        self.message = message
        self.details = details  # (loc, message) per culprit, when there are several

    def detail(self) -> list[dict]:
        """The 422 body's ``detail``: FastAPI's validation-error shape."""
        pairs = self.details or [(["body", self.field], self.message)]
        return [{"loc": loc, "msg": msg, "type": "value_error"} for loc, msg in pairs]


@dataclass
class _Series:
    """One usable series on its way to a shard."""

    symbol: str
    values: np.ndarray  # (L, 6) float32
    ts: np.ndarray  # (L,) datetime64[ns]
    session: tuple[str | None, str] | None = None  # (timezone, session_timezone) from metadata
    exchange: str | None = None  # venue whose calendar gives the future timestamps (request or metadata)
    warnings: list[dict] = field(default_factory=list)  # {code, message}


@dataclass
class Prepared:
    """The request's usable series, in request order, and the per-symbol errors."""

    symbols: list[str] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)  # (L_i, 6) float32
    x_ts: list[np.ndarray] = field(default_factory=list)  # (L_i,) datetime64[ns]
    y_ts: list[np.ndarray] = field(default_factory=list)  # (H,) datetime64[ns]
    warnings: list[list[dict]] = field(default_factory=list)  # per usable series: {code, message}
    errors: list[dict] = field(default_factory=list)  # {symbol, code, message}


@dataclass
class Outcome:
    """A finished request: arrays per successful symbol, request order."""

    model: dict
    symbols: list[str]
    timestamps: list[np.ndarray]  # (H,) datetime64[ns]
    mean: list[np.ndarray]  # (H, 6)
    quantile_levels: tuple[float, ...]
    quantiles: list[np.ndarray | None]  # (Q, H, 6)
    paths: list[np.ndarray | None]  # (S, H, 6)
    errors: list[dict]
    timing: dict[str, float]
    history_length: list[int] = field(default_factory=list)  # candles of history each series used
    last_timestamp: list[np.datetime64] = field(default_factory=list)  # its last input candle
    warnings: list[list[dict]] = field(default_factory=list)  # {code, message} per series
    calibrated: bool = False  # quantiles corrected by the model's calibration
    histories: list[np.ndarray] = field(default_factory=list)  # (L, 6) input candles per series
    summaries: list[dict | None] = field(default_factory=list)  # risk summary per series, with summary
    summary: bool = False  # the request asked for summaries (the Arrow answer then has summary_* columns)


DEFAULT_SHARD_TIMEOUT_S = 30.0  # shard_timeout_s unset: at most this (or the deadline / (shard_retries + 1))
HEDGE_FACTOR = 3.0  # a call is slow past this many times the median answer time of the request's shards
HEDGE_RECHECK_S = 1.0  # how often a waiting shard re-reads that median (other shards keep answering)


@dataclass
class ShardRun:
    """One request's shard bookkeeping: the hedging rule's inputs and what ``timing`` reports.

    A call is hedged (a copy sent to another replica) once it has waited ``shard_timeout_s``
    AND ``HEDGE_FACTOR`` times the median answer time of the shards of this request answered
    so far; not before any shard has been answered. A service slow everywhere (every shard
    slow) is thus never hedged, only a replica slower than the others."""

    shard_timeout_s: float | None  # None: never hedge
    retries: int = 0  # re-sends: replica gone, or hedged
    timeouts: int = 0  # calls hedged
    latencies: list[float] = field(default_factory=list)  # s from a shard's first send to its answer

    def hedge_after(self) -> float | None:
        if self.shard_timeout_s is None or not self.latencies:
            return None
        return max(self.shard_timeout_s, HEDGE_FACTOR * statistics.median(self.latencies))


def _to_ns(ts) -> np.ndarray:
    """Naive datetime64[ns]; an aware index keeps its local wall clock (what time features see)."""
    idx = pd.DatetimeIndex(ts)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    # as_unit raises OutOfBoundsDatetime (a ValueError) outside 1677-2262, where a plain cast wraps silently
    return idx.as_unit("ns").to_numpy(dtype="datetime64[ns]")


def _error(symbol: str, code: ErrorCode, message: str) -> dict:
    return {"symbol": symbol, "code": code, "message": message}


def _warning(code: WarningCode, message: str) -> dict:
    return {"code": code, "message": message}


def _wall_clock(t: pd.Timestamp, tz: str | None) -> pd.Timestamp:
    """``t`` as a naive wall-clock time of zone ``tz`` (how the store keeps stamps)."""
    if t.tzinfo is None:
        return t
    return (t.tz_convert(tz) if tz else t).tz_localize(None)


def as_of_warning(as_of: datetime, ts: np.ndarray, last_stored: np.datetime64,
                  timezone: str | None) -> dict | None:
    """A warning when ``as_of`` lies more than one candle after the symbol's last stored
    candle (``last_stored``, from the window read): the forecast then starts after that
    older candle. ``timezone``: the symbol's zone, for an aware ``as_of``."""
    last = pd.Timestamp(last_stored)
    if len(ts) < 2 or pd.Timestamp(ts[-1]) != last:
        return None  # the window stops inside the data: as_of is within it
    step = pd.Timestamp(ts[-1]) - pd.Timestamp(ts[-2])
    wall = _wall_clock(pd.Timestamp(as_of), timezone)
    if wall <= last + step:
        return None
    return _warning(
        WarningCode.AS_OF_AFTER_DATA,
        f"as_of {wall} is after the last stored candle {last}; the forecast starts after {last}",
    )


def check_exchange(exchange: str) -> None:
    """``RequestInvalid`` naming ``exchange`` when no calendar of that name exists."""
    from kronos_core.data.calendars import UnknownExchangeError, exchange_sessions

    try:
        exchange_sessions(exchange)
    except UnknownExchangeError as exc:
        raise RequestInvalid("exchange", str(exc)) from None


class FutureTimestamps:
    """``future_timestamps`` with a cache: portfolios share calendars, so 1,000 symbols
    usually need only a handful of distinct calls."""

    def __init__(self, fn: Callable[..., pd.DatetimeIndex] | None = None, size: int = 4096):
        if fn is None:
            from kronos_core.data.timestamps import future_timestamps as fn
        self.fn = fn
        self.size = size
        self._cache: dict[tuple, np.ndarray] = {}

    def __call__(self, history: np.ndarray, horizon: int, session: tuple[str | None, str] | None = None,
                 exchange: str | None = None) -> np.ndarray:
        """session: (timezone, session_timezone) from the symbol's metadata, for markets whose
        sessions follow another clock than their stamps (spot FX: New York). exchange: the
        venue (XNYS, XSHG, ...) whose calendar gives the dates (holidays included)."""
        h = np.ascontiguousarray(history.astype("datetime64[ns]"))
        key = (hashlib.blake2b(h.view(np.int64).tobytes(), digest_size=16).digest(), horizon, session, exchange)
        hit = self._cache.get(key)
        if hit is None:
            kw: dict[str, Any] = {}
            if session is not None:
                kw["timezone"], kw["session_timezone"] = session
            if exchange is not None:
                kw["exchange"] = exchange
            hit = _to_ns(self.fn(pd.DatetimeIndex(h), horizon, **kw))
            if len(hit) != horizon:
                raise ValueError(f"future_timestamps returned {len(hit)} timestamps for horizon {horizon}")
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = hit
        return hit


def inline_arrays(s: InlineSeries, lookback: int) -> tuple[np.ndarray, np.ndarray]:
    """(values (L, 6) float32, timestamps (L,) datetime64[ns]) of an inline series, last ``lookback``.

    Raises ``ValueError`` naming the first bad value (``close[7] is NaN``) or timestamp: the
    gateway reports it as this series' ``invalid_series`` error and forecasts the others.
    """
    rows = s.candles
    n = len(rows)
    raw = np.zeros((n, 6), dtype=np.float64)  # (L, 6)
    width = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)  # (L,) 5, 6 or 7
    for i, r in enumerate(rows):
        raw[i, : len(r) - 1] = r[1:]
    prices = raw[:, :4]  # (L, 4)
    raw[width == 5, 4] = 0.0  # no volume: volume = amount = 0
    no_amount = width <= 6
    raw[no_amount, 5] = raw[no_amount, 4] * prices[no_amount].mean(axis=1)
    with np.errstate(over="ignore"):
        values = raw.astype(np.float32)  # (L, 6); beyond float32's range becomes inf, caught below
    bad = ~np.isfinite(values)
    if bad.any():
        i, k = (int(x) for x in np.argwhere(bad)[0])
        if k == 5 and no_amount[i] and np.isfinite(values[i, :5]).all():
            raise ValueError(
                f"amount[{i}] was not given, and the derived volume × mean price ({raw[i, 5]:.3g}) is beyond "
                "float32 range; give the amount, or scale volume or prices"
            )
        what = "NaN" if np.isnan(raw[i, k]) else "infinite or beyond float32 range"
        raise ValueError(
            f"{FEATURE_NAMES[k]}[{i}] is {what} ({int(bad.sum())} bad value(s)); candles must be finite numbers"
        )
    try:
        ts = _to_ns([r[0] for r in rows])
    except Exception as exc:  # out of the datetime64[ns] range (years 1677-2262), mixed time zones
        raise ValueError(f"timestamps: {exc}") from None
    steps = np.diff(ts.view(np.int64))  # (L-1,)
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0)) + 1
        how = "repeats" if steps[i - 1] == 0 else "is before"
        raise ValueError(
            f"timestamps must be strictly increasing: timestamps[{i}] = {rows[i][0]} {how} timestamps[{i - 1}]"
        )
    return values[-lookback:], ts[-lookback:]


def store_as_of(value) -> pd.Timestamp | None:
    """``as_of`` for the store, whose stamps are datetime64[ns] (1677-2262): a time after that
    range cuts nothing (None), one before it cuts everything (each symbol: no_data)."""
    ts = pd.Timestamp(value)
    try:
        ts.as_unit("ns")
    except (OverflowError, ValueError):  # OutOfBoundsDatetime is a ValueError
        return None if ts.year > 2000 else pd.Timestamp("1678-01-01", tz=ts.tz)
    return ts


_ABS_PATH = re.compile(r"(?<![\w.:/])(?:/[^\s'\"/,;:()\[\]]+)+/?")


def public_message(message: str, store_root: Any = None) -> str:
    """Strip server file paths from a message sent to clients (paths stay in the logs).

    The store's folder becomes its name (``store sample-store-v1``), any other absolute path
    its last component (``/root/.cache/kronos/x/AAPL.arrow`` -> ``AAPL.arrow``).
    """
    if store_root is not None:
        root = str(store_root).rstrip("/")
        if root:
            message = message.replace(root + "/", "").replace(root, os.path.basename(root) or "store")
    return _ABS_PATH.sub(lambda m: os.path.basename(m.group(0).rstrip("/")) or "/", message)


class Gateway:
    """Turns a ``ForecastRequest`` into shards, runs them on the ``replicas``, gathers in order."""

    def __init__(
        self,
        settings: Settings,
        store: CandleStore,
        replicas: Replicas,
        metrics: Metrics,
        num_replicas: int,
        fit_factory: Callable[[ReplicaInfo, int, int], Callable[[int], int]] | None = None,
        future: Callable[..., np.ndarray] | None = None,
    ):
        self.settings = settings
        self.store = store
        self.replicas = replicas
        self.metrics = metrics
        self.num_replicas = num_replicas
        self.fit_factory = fit_factory or memory_model_fit
        self._future = future
        self._info: ReplicaInfo | None = None
        self._inflight = 0
        self._shards_inflight = 0

    @property
    def future(self) -> Callable[..., np.ndarray]:
        if self._future is None:
            self._future = FutureTimestamps()
        return self._future

    async def info(self) -> ReplicaInfo:
        if self._info is None:
            self._info = await self.replicas.describe()
        return self._info

    def public(self, message: str) -> str:
        """``message`` fit for a client: the store named by its folder name, no server paths."""
        return public_message(message, self.store.root)

    def remember(self, info: ReplicaInfo) -> None:
        """Keep a replica description obtained elsewhere (the readiness probe)."""
        if self._info is None:
            self._info = info

    # ------------------------------------------------------------------ inputs
    def _store_series(self, req: ForecastRequest, lookback: int, errors: list[dict]) -> list[_Series]:
        # the store reads a naive as_of as each symbol's wall clock, an aware one converted
        as_of = None if req.as_of is None else store_as_of(req.as_of)
        batch = self.store.read_windows(list(req.symbols or []), lookback, as_of=as_of, frequency=req.frequency)
        errors.extend(_error(e.symbol, ErrorCode(e.code), e.message) for e in batch.errors)
        items = []
        for win in batch.windows:
            meta = win.metadata
            session = (meta.get("timezone"), meta["session_timezone"]) if meta.get("session_timezone") else None
            item = _Series(win.symbol, np.asarray(win.values, dtype=np.float32), _to_ns(win.timestamps), session,
                           req.exchange or meta.get("exchange"))
            if req.as_of is not None:
                w = as_of_warning(req.as_of, item.ts, win.last_stored, meta.get("timezone"))
                if w is not None:
                    item.warnings.append(w)
            items.append(item)
        return items

    def _inline_series(self, req: ForecastRequest, lookback: int, errors: list[dict]) -> list[_Series]:
        items = []
        seen: dict[str, int] = {}
        for j, s in enumerate(req.series or []):
            if s.symbol in seen:
                errors.append(_error(s.symbol, ErrorCode.INVALID_SERIES,
                                     f"series[{j}]: symbol {s.symbol!r} repeats series[{seen[s.symbol]}]; names must be unique"))
                continue
            seen[s.symbol] = j
            try:
                values, ts = inline_arrays(s, lookback)
            except ValueError as exc:
                errors.append(_error(s.symbol, ErrorCode.INVALID_SERIES, f"series[{j}]: {exc}"))
                continue
            items.append(_Series(s.symbol, values, ts, exchange=req.exchange))
        return items

    def prepare(self, req: ForecastRequest, lookback: int) -> Prepared:
        out = Prepared()
        if req.symbols is not None:
            items = self._store_series(req, lookback, out.errors)
        else:
            items = self._inline_series(req, lookback, out.errors)
        short = self.settings.min_history_warning
        for it in items:
            try:
                y = self.future(it.ts, req.horizon, it.session, it.exchange)
            except Exception as exc:
                out.errors.append(_error(it.symbol, ErrorCode.NO_CALENDAR, f"future timestamps: {exc}"))
                continue
            if len(it.values) < short:
                it.warnings.append(_warning(
                    WarningCode.SHORT_HISTORY,
                    f"{len(it.values)} candles of history, fewer than {short}: the forecast has little to go on",
                ))
            out.symbols.append(it.symbol)
            out.values.append(it.values)
            out.x_ts.append(it.ts)
            out.y_ts.append(y)
            out.warnings.append(it.warnings)
        if req.symbols is not None:  # errors in request order, like the forecasts
            order = {s: i for i, s in enumerate(req.symbols)}
            out.errors.sort(key=lambda e: order.get(e["symbol"], len(order)))
        return out

    # ------------------------------------------------------------------ running
    async def _run_shard(self, shard: Shard, run: ShardRun) -> ShardResult:
        self._shards_inflight += 1
        self.metrics.queue_depth.labels(stage="shards").set(self._shards_inflight)
        try:
            return await self._send_until_answered(shard, run)
        finally:
            self._shards_inflight -= 1
            self.metrics.queue_depth.labels(stage="shards").set(self._shards_inflight)

    async def _send_until_answered(self, shard: Shard, run: ShardRun) -> ShardResult:
        """Sends ``shard`` until a replica answers it, at most ``shard_retries`` re-sends.

        A replica that dies (``ReplicaGone``) gets its shard re-sent after a short backoff. A
        call unanswered past ``run.hedge_after()`` gets a copy of the shard sent while the call
        is kept (a hedged request): the handle routes by queue length, so the slow call, still
        counted on the slow replica, steers the copy to another one; cancelling first would
        empty the slow replica's queue and invite the copy back to it. The first answer wins
        and every other call is cancelled. The last allowed send waits without a shard deadline.
        """
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Future] = set()
        sends, failure, first_sent, sent_at = 0, "", loop.time(), loop.time()
        try:
            while True:
                if sends == 0 or (not pending and failure):
                    pending.add(asyncio.ensure_future(self.replicas.forecast_shard(shard)))
                    sends, sent_at = sends + 1, loop.time()
                last = sends > self.settings.shard_retries
                due = None if last else run.hedge_after()
                wait_s = None if last or run.shard_timeout_s is None else HEDGE_RECHECK_S
                if due is not None:
                    wait_s = min(HEDGE_RECHECK_S, max(0.0, due - (loop.time() - sent_at)))
                done, pending = await asyncio.wait(pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    due = None if last else run.hedge_after()
                    if due is not None and loop.time() - sent_at >= due:  # slow: hedge on another replica
                        run.timeouts += 1
                        self.metrics.shard_timeouts.inc()
                        self._count_retry(run)
                        log.warning("shard %s/%d: no answer within %.3g s; sending a copy (send %d)",
                                    shard.request_id, shard.index, due, sends + 1)
                        pending.add(asyncio.ensure_future(self.replicas.forecast_shard(shard)))
                        sends, sent_at = sends + 1, loop.time()
                    continue
                answers = [t.result() for t in done if t.exception() is None]
                for res in answers:  # a loser's batch reports are recorded too: each exactly once
                    for rep in res.reports:
                        self.metrics.record_batch(rep)
                if answers:
                    run.latencies.append(loop.time() - first_sent)
                    return answers[0]
                for t in done:
                    exc = t.exception()
                    if not isinstance(exc, ReplicaGone):
                        raise exc
                    failure = str(exc)
                if pending:
                    continue  # a hedged copy may still answer
                if last:
                    return ShardResult(shard.request_id, shard.index, "", None, None, None,
                                       error=f"replica unavailable after {sends} attempts: {failure}",
                                       error_code=ErrorCode.REPLICA_UNAVAILABLE)
                self._count_retry(run)
                log.warning("shard %s/%d: replica gone (%s); retry %d", shard.request_id, shard.index, failure, sends)
                await asyncio.sleep(min(2.0, 0.2 * sends))
        finally:
            for t in pending:  # the slower copies: drop them where Ray still can
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _count_retry(self, run: ShardRun) -> None:
        run.retries += 1
        self.metrics.shard_retries.inc()

    def shard_timeout(self, request_timeout_s: float) -> float | None:
        """The least a shard's call waits before it may be hedged: ``shard_timeout_s``, by
        default 30 s or the request's deadline shared by the shard's sends (``/ (shard_retries
        + 1)``), whichever is less. None with one replica: there is nowhere else to go."""
        if self.num_replicas < 2 or self.settings.shard_retries == 0:
            return None
        if self.settings.shard_timeout_s is not None:
            return min(self.settings.shard_timeout_s, request_timeout_s)
        return min(DEFAULT_SHARD_TIMEOUT_S, request_timeout_s / (self.settings.shard_retries + 1))

    async def forecast(self, req: ForecastRequest, timeout_s: float | None = None) -> Outcome:
        """Run ``req``; past ``timeout_s`` (default: the ``request_timeout_s`` setting) raise
        ``DeadlineExceeded`` after cancelling every shard still pending or running."""
        timeout_s = self.settings.request_timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(self._admit(req, self.shard_timeout(timeout_s)), timeout_s)
        except TimeoutError:
            self.metrics.record_error(ErrorCode.DEADLINE_EXCEEDED)
            raise DeadlineExceeded(
                f"the forecast took longer than its {timeout_s:g} s deadline; its pending shards were cancelled "
                "(ask fewer series, or raise KRONOS_REQUEST_TIMEOUT_S)"
            ) from None

    async def _admit(self, req: ForecastRequest, shard_timeout_s: float | None = None) -> Outcome:
        if req.n_series > self.settings.max_symbols:
            field_name = "symbols" if req.symbols is not None else "series"
            raise RequestInvalid(field_name, f"{field_name}: {req.n_series} given, at most {self.settings.max_symbols} per request")
        if self._inflight >= self.settings.max_inflight_requests:
            self.metrics.record_error(ErrorCode.OVERLOADED)
            raise Overloaded(
                f"{self._inflight} forecast requests in flight (limit {self.settings.max_inflight_requests})",
                self.settings.retry_after_s,
            )
        self._inflight += 1
        self.metrics.queue_depth.labels(stage="requests").set(self._inflight)
        try:
            return await self._forecast(req, shard_timeout_s)
        finally:
            self._inflight -= 1
            self.metrics.queue_depth.labels(stage="requests").set(self._inflight)

    def _shards(self, req: ForecastRequest, prep: Prepared, info: ReplicaInfo) -> tuple[list[slice], list[Shard]]:
        key = SamplingKey(
            horizon=req.horizon, sample_count=req.sample_count, temperature=req.temperature,
            top_k=req.top_k, top_p=req.top_p, seed=req.seed,
            quantiles=tuple(req.quantiles), return_paths=req.return_paths or req.summary, repair=req.repair,
            calibrate=calibration_covers(info.model.get("calibration"), req.horizon, req.quantiles),
        )
        fit = self.fit_factory(info, req.horizon, req.sample_count)
        try:
            slices = plan_shards(
                [len(v) for v in prep.values], req.horizon, req.sample_count, fit,
                self.num_replicas, self.settings.shards_per_replica, info.max_batch_tokens,
            )
        except TooLargeError as exc:
            raise RequestInvalid("lookback", str(exc)) from None
        rid = uuid.uuid4().hex[:12]
        shards = [Shard(rid, i, prep.values[s], prep.x_ts[s], prep.y_ts[s], key) for i, s in enumerate(slices)]
        return slices, shards

    async def _run_all(self, shards: list[Shard], run: ShardRun) -> list[ShardResult]:
        # Pull model: a request keeps only a few shards in flight (by default two per replica: one
        # running, one queued so the replica never idles between shards); the next shard goes to
        # the replica that frees up first (the handle routes to the shorter queue). Sending all
        # shards at once let the router pile 3 of 4 on one replica while the other idled.
        in_flight = asyncio.Semaphore(max(1, self.num_replicas * self.settings.shards_in_flight_per_replica))

        async def one(shard: Shard) -> ShardResult:
            async with in_flight:
                return await self._run_shard(shard, run)

        tasks = [asyncio.ensure_future(one(s)) for s in shards]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:  # cancelled (client gone) or overloaded: stop the other shards
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _forecast(self, req: ForecastRequest, shard_timeout_s: float | None = None) -> Outcome:
        t0 = time.perf_counter()
        info = await self.info()
        lookback = max(2, info.max_context - req.horizon) if req.lookback is None else req.lookback
        if req.exchange is not None:
            check_exchange(req.exchange)
        prep = await asyncio.to_thread(self.prepare, req, lookback)
        t_read = time.perf_counter()
        if req.series is not None and not prep.symbols:
            # nothing usable: the request as a whole is invalid (422), one entry per series
            raise RequestInvalid("series", "no inline series is usable", details=[
                (["body", "series", i], self.public(e["message"])) for i, e in enumerate(prep.errors)
            ])
        slices, shards = self._shards(req, prep, info)
        run = ShardRun(shard_timeout_s)
        results = await self._run_all(shards, run)
        t_fc = time.perf_counter()
        out = gather_outcome(info.model, tuple(req.quantiles), prep, slices, results)
        out.calibrated = bool(shards) and shards[0].key.calibrate
        if req.summary:
            out.summary = True
            add_summaries(out, req.vol_alert_factor, keep_paths=req.return_paths)
        self.metrics.series_forecast.inc(len(out.symbols))
        out.errors = [{**e, "message": self.public(e["message"])} for e in out.errors]
        for e in out.errors:
            self.metrics.record_error(e["code"])
        out.timing = {
            "read_ms": round((t_read - t0) * 1e3, 3),
            "forecast_ms": round((t_fc - t_read) * 1e3, 3),
            "total_ms": round((time.perf_counter() - t0) * 1e3, 3),
            "series": float(len(out.symbols)),
            "shards": float(len(shards)),
            "shard_retries": float(run.retries),  # re-sends: replica gone, or slow (hedged)
            "shard_timeouts": float(run.timeouts),  # shard calls past their deadline, each hedged
            "lookback": float(lookback),  # the window asked for; each series' own: history_length
        }
        return out


def calibration_covers(cal: dict | None, horizon: int, quantiles) -> bool:
    """Whether the replicas' calibration (``calibration_info``) covers this request's horizon and
    quantile levels; uncovered requests get the raw sample quantiles and ``calibrated: false``."""
    if not cal or not quantiles or horizon > cal["horizon"]:
        return False
    lo, hi = min(cal["levels"]), max(cal["levels"])
    central = [abs(2 * float(q) - 1) for q in quantiles if abs(float(q) - 0.5) > 1e-12]
    return all(lo - 1e-9 <= c <= hi + 1e-9 for c in central)


def gather_outcome(model: dict, levels: tuple[float, ...], prep: Prepared, slices: list[slice],
                   results: list[ShardResult]) -> Outcome:
    """The shards' results put back in request order; a failed shard's symbols become errors."""
    out = Outcome(model=model, symbols=[], timestamps=[], mean=[], quantile_levels=levels,
                  quantiles=[], paths=[], errors=list(prep.errors), timing={})
    for sl, res in zip(slices, results, strict=True):
        if res.error is not None:
            code = res.error_code or ErrorCode.FORECAST_FAILED
            out.errors.extend(_error(s, code, res.error) for s in prep.symbols[sl])
            continue
        for j in range(sl.stop - sl.start):
            i = sl.start + j
            q = None if res.quantiles is None else res.quantiles[:, j]  # (Q, H, 6)
            p = None if res.paths is None else res.paths[j]  # (S, H, 6)
            if not all(np.isfinite(a).all() for a in (res.mean[j], q, p) if a is not None):
                # JSON has no NaN: a non-finite forecast is this series' error, not a null in the answer
                out.errors.append(_error(prep.symbols[i], ErrorCode.FORECAST_FAILED, (
                    "the forecast holds NaN or infinite values; this series' candles likely span too many "
                    "orders of magnitude for the model (check its values)")))
                continue
            out.symbols.append(prep.symbols[i])
            out.timestamps.append(prep.y_ts[i])
            out.mean.append(res.mean[j])
            out.quantiles.append(q)
            out.paths.append(p)
            out.history_length.append(len(prep.values[i]))
            out.last_timestamp.append(prep.x_ts[i][-1])
            out.warnings.append(prep.warnings[i])
            out.histories.append(prep.values[i])
    return out


def add_summaries(out: Outcome, vol_factor: float, keep_paths: bool) -> None:
    """Each forecast's risk summary from its close paths; drops the paths unless asked for."""
    from kronos_core.eval.risk import risk_summary

    close = FEATURE_NAMES.index("close")
    for i, p in enumerate(out.paths):
        hist = out.histories[i][:, close].astype(np.float64)
        try:
            summary = risk_summary(p[:, :, close], float(hist[-1]), hist, vol_factor).to_dict()
            finite = all(math.isfinite(v) for v in summary.values() if isinstance(v, float))
            out.summaries.append(summary if finite else None)  # JSON has no NaN
        except (ValueError, TypeError, IndexError):  # non-positive prices or no paths: no summary
            out.summaries.append(None)
        if not keep_paths:
            out.paths[i] = None


def memory_model_fit(info: ReplicaInfo, horizon: int, sample_count: int) -> Callable[[int], int]:
    """``fit(lookback)``: series that fit one replica, from the engine's memory model."""
    from kronos_core.engine.memory import max_batch_that_fits

    cache: dict[int, int] = {}

    def fit(lookback: int) -> int:
        if lookback not in cache:
            cache[lookback] = int(
                max_batch_that_fits(
                    info.model_cfg, info.tokenizer_cfg, info.budget_bytes, lookback, horizon,
                    sample_count=sample_count, max_context=info.max_context,
                )
            )
        return cache[lookback]

    return fit


# ---------------------------------------------------------------------- encoders

def _iso(ts: np.ndarray) -> list[str]:
    return list(np.datetime_as_string(ts, unit="s"))


def _candles(a: np.ndarray) -> dict[str, np.ndarray]:
    # a: (H, 6) -> columns; contiguous float32 arrays (orjson serialises numpy natively)
    return {name: np.ascontiguousarray(a[:, k]) for k, name in enumerate(FEATURE_NAMES)}


def quantile_label(level: float) -> str:
    """A quantile level as text, exact and distinct: Python's shortest round-trip repr
    (0.1 -> "0.1", 0.1234567 -> "0.1234567"). JSON keys and Arrow column names both use it."""
    return repr(float(level))


def _inputs(out: Outcome, i: int) -> dict[str, Any]:
    """What series i's forecast was made from: its history length, last input candle, warnings."""
    return {
        "history_length": out.history_length[i],
        "last_timestamp": _iso(out.last_timestamp[i : i + 1])[0],
        "warnings": out.warnings[i],
    }


def outcome_to_json(out: Outcome) -> dict:
    forecasts = []
    for i, sym in enumerate(out.symbols):
        f: dict[str, Any] = {"symbol": sym, **_inputs(out, i), "timestamps": _iso(out.timestamps[i]),
                             "mean": _candles(out.mean[i])}
        q = out.quantiles[i]
        if q is not None:
            f["quantiles"] = {quantile_label(lv): _candles(q[k]) for k, lv in enumerate(out.quantile_levels)}
        p = out.paths[i]
        if p is not None:
            f["paths"] = [_candles(p[s]) for s in range(p.shape[0])]
        if out.summaries and out.summaries[i] is not None:
            f["summary"] = out.summaries[i]
        forecasts.append(f)
    return {"model": out.model, "calibrated": out.calibrated, "forecasts": forecasts, "errors": out.errors,
            "timing": out.timing}


def summary_columns() -> list[tuple[str, Any]]:
    """``(column, Arrow type)`` of the risk-summary columns of the Arrow answer: ``summary_<field>``
    for every field of ``RISK_ARROW_SCHEMA`` but ``symbol`` (float64, ``vol_alert`` bool)."""
    from kronos_core.eval.risk import RISK_ARROW_SCHEMA

    return [(f"summary_{f.name}", f.type) for f in RISK_ARROW_SCHEMA if f.name != "symbol"]


def _summary_arrays(out: Outcome, h: int) -> dict[str, Any]:
    """The summary columns: each symbol's summary repeated on its ``h`` rows, null where the
    symbol has none (a summary that could not be computed, e.g. non-positive prices)."""
    import pyarrow as pa

    sums = out.summaries if len(out.summaries) == len(out.symbols) else [None] * len(out.symbols)
    cols = {}
    for name, typ in summary_columns():
        key = name.removeprefix("summary_")
        cols[name] = pa.array([None if s is None else s[key] for s in sums for _ in range(h)], typ)
    return cols


def outcome_to_arrow(out: Outcome) -> bytes:
    """Long format: one row per (symbol, step). Columns: symbol, step, timestamp, the six
    mean columns, then ``<feature>_q<level>`` per quantile (level as in ``quantile_label``),
    then with ``summary`` the ``summary_<field>`` columns (``summary_columns``; per symbol,
    the same on each of its rows, null when it has no summary). Errors, model, timing and each series' inputs (``{symbol, history_length, last_timestamp,
    warnings}``) are JSON in the schema metadata (``kronos.errors``, ``kronos.model``,
    ``kronos.timing``, ``kronos.inputs``)."""
    import orjson
    import pyarrow as pa

    n = len(out.symbols)
    h = len(out.timestamps[0]) if n else 0
    sym_idx = np.repeat(np.arange(n, dtype=np.int32), h)
    cols: dict[str, pa.Array] = {
        "symbol": pa.DictionaryArray.from_arrays(pa.array(sym_idx, pa.int32()), pa.array(out.symbols, pa.string())),
        "step": pa.array(np.tile(np.arange(1, h + 1, dtype=np.int32), n)),
        "timestamp": pa.array(
            np.concatenate(out.timestamps) if n else np.array([], "datetime64[ns]"), pa.timestamp("ns")
        ),
    }
    mean = np.concatenate(out.mean, axis=0) if n else np.zeros((0, 6), np.float32)  # (n*H, 6)
    for k, name in enumerate(FEATURE_NAMES):
        cols[name] = pa.array(np.ascontiguousarray(mean[:, k]), pa.float32())
    if out.quantile_levels:  # the columns exist even when no symbol succeeded: one schema per request
        nq = len(out.quantile_levels)
        q = np.concatenate(out.quantiles, axis=1) if n else np.zeros((nq, 0, 6), np.float32)  # (Q, n*H, 6)
        for qi, lv in enumerate(out.quantile_levels):
            for k, name in enumerate(FEATURE_NAMES):
                cols[f"{name}_q{quantile_label(lv)}"] = pa.array(np.ascontiguousarray(q[qi, :, k]), pa.float32())
    if out.summary:  # like the quantiles: the columns exist even when no symbol succeeded
        cols.update(_summary_arrays(out, h))
    meta = {
        b"kronos.model": orjson.dumps(out.model),
        b"kronos.errors": orjson.dumps(out.errors),
        b"kronos.timing": orjson.dumps(out.timing),
        b"kronos.calibrated": orjson.dumps(out.calibrated),
        b"kronos.inputs": orjson.dumps([{"symbol": sym, **_inputs(out, i)} for i, sym in enumerate(out.symbols)]),
    }
    table = pa.table(cols).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
