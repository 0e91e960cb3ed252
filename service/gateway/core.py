"""The gateway: one portfolio request through its stages, prepare (store windows or inline
candles, future timestamps) -> shards (memory-sized) -> the deadline's plan
(``service.gateway.deadline``: refused at once when planned well past it) -> dispatch (replicas,
retries, hedging) -> gather (request order); encoding is the route's
(``service.gateway.encode``). Here: admission (request count, deadline) and the walk. No Ray and
no FastAPI: the store and the replicas are injected objects typed by
``service.common.interfaces``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from kronos_core.base.lookback import Lookback, choose_lookback
from kronos_core.base.moves import move_report
from kronos_core.calibration.policy import CalibrationPolicy
from service.common.answer import ForecastAnswer, LedgerInputs
from service.common.errors import DeadlineExceeded, Overloaded, RequestInvalid
from service.common.interfaces import CandleStore, Replicas
from service.common.messages import ReplicaInfo, Shard
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway.deadline import Deadline, Source, check, request_planner, seconds_text
from service.gateway.dispatch import Dispatcher, ShardRun, shard_timeout
from service.gateway.future import FutureTimestamps
from service.gateway.gather import gather, public_message, risk_summaries
from service.gateway.prepare import Prepared, check_exchange, check_horizon, prepare
from service.gateway.record import LedgerRecorder
from service.gateway.shards import make_shards, memory_model_fit, warm_memory_model

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Staged:
    """A request read, sharded and planned, before any shard is sent (``ForecastPipeline``)."""

    req: ForecastRequest
    info: ReplicaInfo
    choice: Lookback
    prep: Prepared
    slices: list[slice]
    shards: list[Shard]
    record: bool
    loops: int
    t0: float
    t_read: float
    request_id: str | None  # the HTTP request's id (None: a new one, which the shards carry)


class ForecastPipeline:
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
        recorder: LedgerRecorder | None = None,
        cut: Callable[[], Awaitable[None]] | None = None,
        on_info: Callable[[ReplicaInfo], None] | None = None,
        live_replicas: Callable[[], int | None] | None = None,
    ):
        self.settings = settings
        self.store = store
        self.replicas = replicas
        self.metrics = metrics
        self.num_replicas = num_replicas
        self.fit_factory = fit_factory or memory_model_fit
        # cut: at shutdown, the shards still pending are answered ``interrupted`` (Dispatcher)
        self.dispatcher = Dispatcher(settings, replicas, metrics, num_replicas, cut=cut)
        self._future = future
        self.recorder = recorder  # None: the ledger is off
        self._info: ReplicaInfo | None = None
        self._on_info = on_info  # told the model's description once (the served schema's limits)
        # predictor replicas running now, as last seen (None: not known yet): a request's plan
        # counts the replicas live, not those asked for
        self._live_replicas = live_replicas
        # decides per series; built once, from _info
        self._calibration: CalibrationPolicy | None = None
        self._inflight = 0

    @property
    def future(self) -> Callable[..., np.ndarray]:
        if self._future is None:
            self._future = FutureTimestamps()
        return self._future

    async def info(self) -> ReplicaInfo:
        if self._info is None:
            self.remember(await self.replicas.describe())
        assert self._info is not None
        return self._info

    def public(self, message: str) -> str:
        """``message`` fit for a client: the store named by its folder name, no server paths."""
        return public_message(message, self.store.root)

    def remember(self, info: ReplicaInfo) -> None:
        """Keep a replica description obtained elsewhere (the readiness probe)."""
        if self._info is None:
            self._info = info
            if info.calibration is not None:
                self._calibration = CalibrationPolicy.from_description(info.calibration)
            warm_memory_model(info)  # once, before the first request needs it
            if self._on_info is not None:
                self._on_info(info)

    def record(self, answer: ForecastAnswer) -> None:
        """Hand an answered request's forecasts to the ledger writer (a queue: no disk, never
        raises). The route calls it once, after the answer is sent, so that the writer thread
        never competes with encoding the answer; nothing with the ledger off or ``record:
        false``."""
        if answer.ledger is not None and self.recorder is not None:
            self.recorder.submit(answer)

    def prepare(self, req: ForecastRequest, lookback: int | Lookback) -> Prepared:
        return prepare(req, lookback, self.store, self.future, self.settings.min_history_warning)

    def warm_up(
        self, limit: int = 16, scan: int = 5000, lookback: int = 64, horizon: int = 8
    ) -> list[str]:
        """Prepare one stored symbol of each kind (exchange and session clock) before the gateway
        takes requests, so that the first user request does not pay for the first window read and
        for building the exchanges' calendars: in the sample store that was 0.2-0.35 s of a 5-symbol
        request's first 0.3-0.5 s (``read_ms`` 190-356 against 0.7 warm). The kinds are found among
        the first ``scan`` symbols' metadata (2,000 took 57 ms). Returns the symbols prepared; never
        raises (a store that cannot be read is the requests' error to report, not the
        start-up's)."""
        picked: dict[tuple, str] = {}
        try:
            for symbol in self.store.symbols()[:scan]:
                meta = self.store.metadata(symbol)
                picked.setdefault((meta.get("exchange"), meta.get("session_timezone")), symbol)
                if len(picked) >= limit:
                    break
            if picked:
                self.prepare(
                    ForecastRequest(symbols=list(picked.values()), horizon=horizon, record=False),
                    lookback,
                )
        except Exception as exc:  # noqa: BLE001 - logged; the service starts all the same
            log.warning(
                "gateway warm-up failed (%s: %s); the first request reads the store cold",
                type(exc).__name__,
                self.public(str(exc)),
            )
        return list(picked.values())

    def shard_timeout(self, request_timeout_s: float) -> float | None:
        """See ``service.gateway.dispatch.shard_timeout``."""
        return shard_timeout(self.settings, self.num_replicas, request_timeout_s)

    def lanes(self, info: ReplicaInfo) -> int:
        """Step loops that run a request's shards side by side, as the deadline plan counts them:
        the replicas live (as last seen; those asked for until then) x each replica's step loops,
        but a CPU replica's loops as one lane: they share the machine's cores with each other,
        the gateway and Ray. On the 2-core development machine (issue 53, 2026-12-07, quiet) one
        replica's two loops answered 1,000 symbols x 32 paths in 23.3 s at horizon 5 and 92.7 s
        at horizon 24, against 33.0 s and 90.6 s planned for one loop (16.5 s and 45.3 s for
        two): counted as two lanes, an accepted request could run twice its plan."""
        live = self._live_replicas() if self._live_replicas is not None else None
        replicas = min(live, self.num_replicas) if live else self.num_replicas
        loops = 1 if info.device.startswith("cpu") else info.step_loops
        return max(1, replicas) * max(1, loops)

    async def forecast(
        self, req: ForecastRequest, timeout_s: float | None = None, request_id: str | None = None,
        timeout_source: Source = "default",
    ) -> ForecastAnswer:
        """Run ``req``; past ``timeout_s`` (default: the ``request_timeout_s`` setting) raise
        ``DeadlineExceeded`` after cancelling every shard still pending or running. Planned well
        past it, raise ``DeadlineUnreachable`` before any shard is sent; a default deadline
        (``timeout_source``: ``request`` when the client set it) may be lengthened up to
        ``max_request_timeout_s`` instead (``service.gateway.deadline``).
        ``request_id``: the id its shards, answer and ledger rows carry (default: a new one)."""
        deadline = Deadline(
            self.settings.request_timeout_s if timeout_s is None else timeout_s, timeout_source
        )
        if req.n_series > self.settings.max_symbols:
            field_name = "symbols" if req.symbols is not None else "series"
            raise RequestInvalid(
                field_name,
                f"{field_name}: {req.n_series} given, "
                f"at most {self.settings.max_symbols} per request",
            )
        if self._inflight >= self.settings.inflight_limit:
            raise Overloaded(
                f"{self._inflight} forecast requests in flight "
                f"(limit {self.settings.inflight_limit})",
                self.settings.retry_after_s,
            )
        self._inflight += 1
        self.metrics.queue_depth.labels(stage="requests").set(self._inflight)
        try:
            staged = await self._staged_within(deadline, req, request_id)
            return await self._within(deadline, self._run(staged, deadline))
        finally:
            self._inflight -= 1
            self.metrics.queue_depth.labels(stage="requests").set(self._inflight)

    async def _staged_within(
        self, deadline: Deadline, req: ForecastRequest, request_id: str | None
    ) -> Staged:
        """``_stage`` within the deadline; when the read outlasts it (a loaded machine), the
        read still finishes (its thread runs on regardless) so that the plan decides: planned
        far past the deadline, ``DeadlineUnreachable`` (422), as without the slow read; else
        ``DeadlineExceeded`` (504)."""
        stage = asyncio.ensure_future(self._stage(req, deadline, request_id))
        try:
            return await asyncio.wait_for(asyncio.shield(stage), max(0.0, deadline.remaining()))
        except TimeoutError:
            await stage  # raises DeadlineUnreachable when the plan says the request never fit
            raise self._exceeded(deadline) from None

    def _exceeded(self, deadline: Deadline) -> DeadlineExceeded:
        planned = "" if deadline.planned_s is None else f" (planned {deadline.planned_s:.3g} s)"
        return DeadlineExceeded(
            f"the forecast took longer than its {seconds_text(deadline.seconds)} s "
            f"deadline{planned}; its pending shards were cancelled "
            "(ask fewer series, or raise KRONOS_REQUEST_TIMEOUT_S)"
        )

    async def _within(self, deadline: Deadline, work: Coroutine[Any, Any, T]) -> T:
        """``work`` within what is left of ``deadline`` (read when it starts: the plan may have
        lengthened it); past it, ``DeadlineExceeded`` once ``work`` is cancelled."""
        try:
            return await asyncio.wait_for(work, max(0.0, deadline.remaining()))
        except TimeoutError:
            raise self._exceeded(deadline) from None

    async def _stage(
        self, req: ForecastRequest, deadline: Deadline, request_id: str | None = None
    ) -> Staged:
        """Read, shard and plan ``req``; nothing is sent to a replica yet."""
        t0 = time.perf_counter()
        info = await self.info()
        req = req.with_sampling_defaults(info.model.get("sampling"))  # unset: the model's
        if req.price_limits and not self.settings.price_limits:  # off for the whole service
            req = req.model_copy(update={"price_limits": False})
        problem = req.too_many_paths()
        if problem:
            raise RequestInvalid("return_paths", problem)
        check_horizon(req.horizon, info.max_context)  # before any store read: refused at once
        choice = choose_lookback(req.lookback, req.horizon, info.max_context,
                                 info.model.get("calibration"))
        if req.exchange is not None:
            check_exchange(req.exchange)
        prep = await asyncio.to_thread(self.prepare, req, choice)
        t_read = time.perf_counter()
        # no usable series (inline or store) is still an answer: no forecasts, every series in
        # errors; a series is judged alone, whatever stands beside it (docs/service.md)
        fit = self.fit_factory(info, req.horizon, req.paths)
        record = self.recorder is not None and req.record
        # each step loop of a replica runs batches of its own: sharding and dispatch count loops
        loops = self.num_replicas * info.step_loops
        slices, shards = make_shards(
            req,
            prep,
            info,
            fit,
            loops,
            self.settings.shards_per_replica,
            want_paths=record and self.settings.ledger_paths,
            min_shard_tokens=self.settings.min_shard_tokens,
            calibration=self._calibration,
            request_id=request_id,
        )
        self._plan(req, info, prep, fit, deadline)  # before any shard is sent
        return Staged(req, info, choice, prep, slices, shards, record, loops, t0, t_read,
                      request_id)

    def _plan(
        self, req: ForecastRequest, info: ReplicaInfo, prep: Prepared, fit: Callable[[int], int],
        deadline: Deadline,
    ) -> None:
        """The request's planned time against its deadline (``service.gateway.deadline.check``):
        refused (``DeadlineUnreachable``), lengthened, or let run as asked."""
        if not self.settings.deadline_check or info.speed is None or not prep.values:
            return
        lengths = [len(v) for v in prep.values]
        lanes = self.lanes(info)
        try:
            batch = max(1, int(fit(max(lengths))))
        except Exception:  # noqa: BLE001 - the shards were cut with it: never here in practice
            batch = None
        # a GPU's half-precision figures where the engine runs in one; a CPU's fp32 figures
        # always (its measured bf16 rate is no guide to autocast on a CPU: docs/planner.md)
        dtype = str(info.model.get("dtype") or "float32")
        half = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}
        precision = "fp32" if getattr(info.speed, "name", "") == "cpu" else half.get(dtype, "fp32")
        planned = request_planner(
            info, lengths, lanes, batch, str(info.model.get("sliding") or "exact"), precision,
        )
        check(
            deadline, planned, len(lengths), req.horizon, req.paths, self.settings, lanes,
            getattr(info.speed, "name", ""), "symbols" if req.symbols is not None else "series",
        )

    async def _run(self, staged: Staged, deadline: Deadline) -> ForecastAnswer:
        """Send the shards, gather their answers in request order, build the answer."""
        req, info, choice, prep = staged.req, staged.info, staged.choice, staged.prep
        slices, shards, record = staged.slices, staged.shards, staged.record
        t0, t_read, lookback = staged.t0, staged.t_read, choice.value
        # the deadline as planned: a lengthened one gives each shard longer too
        run = ShardRun(self.shard_timeout(deadline.seconds))
        results = await self.dispatcher.run_all(shards, run, staged.loops)
        t_fc = time.perf_counter()
        g = gather(prep, slices, results)
        n = len(g.symbols)
        # asked for the ledger only, the paths stay out of the answer
        paths: list[np.ndarray | None] = g.paths if req.return_paths else [None] * n
        summaries = (
            risk_summaries(g.paths, g.histories, req.vol_alert_factor) if req.summary else []
        )
        errors = [{**e, "message": self.public(e["message"])} for e in g.errors]
        self.metrics.series_forecast.inc(n)
        for e in errors:  # per-symbol errors; whole-request ones are counted by the app's handler
            self.metrics.record_error(e["code"])
        ledger = None
        if record:
            kept: list[np.ndarray | None] = g.paths if self.settings.ledger_paths else [None] * n
            ledger = LedgerInputs(
                source="inline" if req.series is not None else "store",
                frequency=req.frequency,
                recorded_at=np.datetime64(time.time_ns(), "ns"),
                paths=kept,
            )
        return ForecastAnswer(
            model=info.model,
            # else: warnings say which, why
            calibrated=bool(shards) and all(s.calibrate for s in shards),
            calibration_state=g.calibration_state,
            request_id=shards[0].request_id if shards else staged.request_id,
            lookback=choice.as_dict(),
            deadline=deadline.as_dict(),
            store_version=prep.store_version,
            as_of=prep.as_of,
            move_correction=move_report(info.model.get("moves"), req.horizon,
                                        req.move_correction),
            symbols=g.symbols,
            history_length=g.history_length,
            last_timestamp=g.last_timestamp,
            last_close=[float(h[-1, 3]) for h in g.histories],  # (L, 6) each: its last close
            warnings=g.warnings,
            price_limit=[
                None if rule is None else rule.report(x, y, req.price_limits)
                for rule, x, y in zip(g.price_limits, g.history_timestamps, g.timestamps,
                                      strict=True)
            ],
            timestamps=g.timestamps,
            mean=g.mean,
            quantiles=g.quantiles,
            paths=paths,
            summaries=summaries,
            errors=errors,
            timing={
                "read_ms": round((t_read - t0) * 1e3, 3),
                "forecast_ms": round((t_fc - t_read) * 1e3, 3),
                "total_ms": round((time.perf_counter() - t0) * 1e3, 3),
                "series": float(n),
                "shards": float(len(shards)),
                "shard_retries": float(run.retries),  # re-sends: replica gone, or slow (hedged)
                # shard calls past their deadline, each hedged
                "shard_timeouts": float(run.timeouts),
                # the window asked for; each series' own: history_length
                "lookback": float(lookback),
            },
            quantile_levels=tuple(req.quantiles),
            summary=req.summary,
            histories=g.histories,
            history_timestamps=g.history_timestamps,
            ledger=ledger,
        )
