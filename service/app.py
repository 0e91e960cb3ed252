"""The FastAPI ingress (a Serve deployment) bound to the predictor replicas, and the typed
app builder used by ``kronos serve`` and the Serve config files
(``import_path: service.app:build_app``).
"""


import asyncio
import copy
import logging
import math
import os
import time
from typing import Annotated, Any, cast

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from kronos_core.base.errors import ErrorCode
from service.admission import AdmissionMiddleware
from service.auth import ApiKeyMiddleware
from service.common.answer import ForecastResponse
from service.common.errors import (
    LedgerOff,
    LedgerUnavailable,
    RateLimited,
    RequestInvalid,
    ServiceError,
    TooLarge,
)
from service.common.metrics import CONTENT_TYPE, Metrics
from service.common.schemas import (
    ARROW_STREAM,
    MAX_HORIZON,
    MAX_LOOKBACK,
    STORE_YEARS,
    AccuracyResponse,
    CandlesResponse,
    ForecastRequest,
    ModelsResponse,
    QueryDateTime,
    Readiness,
    RequestErrorOut,
    SymbolsPage,
    UnprocessableOut,
)
from service.common.settings import Settings, unknown_kronos_variables
from service.cors import CorsMiddleware
from service.docs_ui import install_docs
from service.gateway import ForecastPipeline
from service.gateway.deadline import Source
from service.gateway.encode import answer_to_arrow, answer_to_json
from service.lifecycle import DrainMiddleware
from service.limits import BodyLimitMiddleware
from service.replica.deployment import Predictor
from service.replica.weights import ship as ship_weights
from service.request_log import RequestIdMiddleware, configure_logging, log_access, request_id_of
from service.responses import error_response
from service.responses import json_response as _json
from service.serve_replicas import ServeReplicas
from service.state import current
from service.ui import candles_answer, install_ui

log = logging.getLogger(__name__)

api = FastAPI(
    title="Kronos portfolio forecasting",
    version="0.1.0",
    description="Forecast the next candles of a whole portfolio with Kronos. "
    "JSON by default; `Accept: application/vnd.apache.arrow.stream` for an Arrow IPC stream.",
    docs_url=None,  # served from the package by install_docs: no CDN
    redoc_url=None,
)
install_docs(api)
install_ui(api)  # /ui, the forecast explorer (service/static/ui)
_openapi_template = api.openapi  # FastAPI's own: builds the schema once and caches it


def _served_openapi() -> dict[str, Any]:
    """The OpenAPI schema with the loaded model's limits: a request's ``horizon`` is at most the
    model's ``max_context`` (a longer one is a 422), so the schema says so once a replica has
    described the model; before that it gives the static ceiling, ``MAX_HORIZON``."""
    schema = _openapi_template()
    limit = current().max_horizon
    if limit is None:
        return schema
    schema = copy.deepcopy(schema)
    horizon = schema["components"]["schemas"]["ForecastRequest"]["properties"]["horizon"]
    horizon["maximum"] = min(float(horizon.get("maximum", limit)), float(limit))
    return schema


def _note_model_limits(info: Any) -> None:
    current().max_horizon = int(info.max_context)


api.openapi = _served_openapi  # type: ignore[method-assign]


@api.middleware("http")
async def _model_limits_before_the_schema(request: Request, call_next):
    """A gateway asked for its schema before any request or probe reached it (one of several
    behind Serve's proxy) asks a replica for the model's limits first, so that every gateway
    serves the same schema: a fuzzer reading the static ceiling sent ``horizon`` 511 to a
    256-candle model and got a 422 for a request its schema allowed. No replica within 10 s:
    the static ceiling, as before."""
    describe = current().describe_model
    if request.url.path == api.openapi_url and current().max_horizon is None and describe:
        try:
            await asyncio.wait_for(describe(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - the schema is served all the same
            log.info("schema served without the model's limits: %s", type(exc).__name__)
    return await call_next(request)


# /v1/symbols offset ceiling: bounded so that no answer holds a >64-bit int
MAX_SYMBOL_OFFSET = 2**31 - 1

# This process's state (metrics, gateway id, body limit, drain, API keys) is reached through
# service.state.current() at each call, never through a global of this module: serve.ingress
# pickles the Ingress class by value, and a global read or set by its methods would be a copy.

# all four sit inside the latency middleware below, so that their 413s and 503s are observed too
# order of refusals: draining (503), then API key (401/403), then body size (413), then admission
# (503 overloaded), all before the body is read.
# Innermost of the refusals: a forecast request waits for a slot (or is refused 503 overloaded)
# only once it passed the others, and still before its body is read (service.admission)
api.add_middleware(
    AdmissionMiddleware, get_admission=lambda: current().admission,
    get_timeout=lambda: current().request_timeout_s,
)
api.add_middleware(BodyLimitMiddleware, get_limits=lambda: current().limits)
api.add_middleware(ApiKeyMiddleware, get_ring=lambda: current().ring())
api.add_middleware(DrainMiddleware, get_state=lambda: current().lifecycle)
# preflights carry no key
api.add_middleware(CorsMiddleware, get_origins=lambda: current().cors_origins)


_SHUTTING_DOWN: dict[str, Any] = {
    "model": RequestErrorOut, "description": "shutting down (code shutting_down); see Retry-After",
}
_NO_CANDLES: dict[str, Any] = {  # GET /v1/candles: a symbol the store cannot give
    "description": "the store cannot give the symbol (unknown, invalid, nothing up to as_of): "
                   "`detail` names it and the store's code",
    "content": {"application/json": {"schema": {
        "type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"],
    }}},
}
_KEYS: dict[int | str, dict[str, Any]] = {  # only when API keys are configured (off by default)
    401: {
        "model": RequestErrorOut,
        "description": "API keys are on and none (or an unknown one) was sent",
    },
    403: {"model": RequestErrorOut, "description": "the key has no access to this route"},
}


@api.middleware("http")
async def _observe(request: Request, call_next):
    """Latency histogram by route template, method and status, and the request's access log
    line; names the gateway replica that answered (``X-Kronos-Gateway``, one of several when
    ``gateway_replicas`` > 1)."""
    t0 = time.perf_counter()
    status = 500
    state = current()
    try:
        response = await call_next(request)
        status = response.status_code
        if state.gateway_id is not None:
            response.headers["X-Kronos-Gateway"] = state.gateway_id
        return response
    finally:
        route = request.scope.get("route")
        path = getattr(route, "path", None) or "unmatched"
        took = time.perf_counter() - t0
        if state.metrics is not None:
            state.metrics.request_seconds.labels(
                route=path, method=request.method, status=str(status)
            ).observe(took)
        if path not in _QUIET_ROUTES:
            log_access(request.method, path, status, took, request.scope)


_QUIET_ROUTES = ("/healthz", "/readyz", "/metrics")  # probes and scrapes: no access line each
# outermost: every line logged for a request, the middlewares' refusals included, has its id
api.add_middleware(RequestIdMiddleware)


@api.exception_handler(ServiceError)
async def _service_error(request: Request, exc: ServiceError) -> Response:
    """Every ``service.common.errors.ServiceError`` raised by a route or the gateway behind it."""
    return error_response(exc, current().metrics)


@api.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError) -> Response:
    """422 naming the field; the offending input is not echoed (it may hold NaN, or be huge)."""
    detail = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    return error_response(RequestInvalid.of(detail), current().metrics)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI answers 400 for a body it cannot decode (invalid UTF-8, nesting too deep for the
    JSON parser): answer the documented 422 instead, in the validation-error shape. A body
    past the limit while it streams (``service.limits.BodyTooLarge``) is 413 ``too_large``."""
    if exc.status_code == 400:
        return error_response(
            RequestInvalid.of(
                [
                    {
                        "loc": ["body"], "msg": f"unreadable body: {exc.detail}; send UTF-8 JSON",
                        "type": "json_invalid",
                    }
                ]
            ),
            current().metrics,
        )
    if exc.status_code == 413:
        return error_response(TooLarge(exc.detail, exc.headers), current().metrics)
    return _json({"detail": exc.detail}, exc.status_code, headers=exc.headers)


def running_replicas(app_name: str) -> int:
    """Predictor replicas Serve reports RUNNING for the app (0: none, or no such app)."""
    st = serve.status()
    app = st.applications.get(app_name)
    dep = app.deployments.get("Predictor") if app else None
    if dep is None:
        return 0
    return int(
        sum(n for s, n in dep.replica_states.items() if str(getattr(s, "value", s)) == "RUNNING")
    )


class ReadyWatch:
    """Keeps ``kronos_replicas_ready`` current every ``every_s`` seconds (a thread), so that the
    ready-replicas alert holds whether or not anything probes ``/readyz``."""

    def __init__(self, app_name: str, metrics: Metrics, every_s: float = 15.0):
        import threading

        self.app_name, self.metrics, self.every_s = app_name, metrics, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kronos-ready-watch", daemon=True)

    def start(self) -> "ReadyWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                running = running_replicas(self.app_name)
                current().replicas_running = running  # what a request's plan counts
                self.metrics.replicas_ready.set(running)
            except Exception as exc:  # noqa: BLE001 - the controller busy: the next round tries again
                log.debug("ready watch: %s", exc)


def cut_answer(out, unanswered: list[str]) -> dict:
    """The 503 body of a request cut at shutdown: the usual answer (the forecasts already
    made, every other symbol in ``errors``) with ``code``, ``detail`` and ``unanswered``."""
    return {
        **answer_to_json(out), "code": ErrorCode.SHUTTING_DOWN,
        "detail": f"the service shut down before {len(unanswered)} symbol(s) were answered; send "
                  "them again "
        "(the forecasts made are in this answer)", "unanswered": unanswered,
    }


# defined before Ingress: serve.ingress pickles the class (by value) where it is decorated
def _replica_id() -> str | None:
    try:
        return serve.get_replica_context().replica_tag
    except Exception:  # not inside a Serve replica (a test building the class by hand)
        return None


def _shared_metrics(settings: Settings) -> Metrics:
    """The gateway's metrics in the folder the node's gateway replicas share (one per app and
    Ray node, named after the node). Gauges of gateways that were killed are dropped first, and
    a drain marker left by an app that is gone (no live gateway wrote here) is removed."""
    import ray

    from service.common.metrics import file_pids, forget_dead_processes, use_shared_dir
    from service.lifecycle import DRAIN_MARKER

    shared = use_shared_dir(settings.gateway_shared_dir(ray.get_runtime_context().get_node_id()))
    forget_dead_processes(shared)
    others = file_pids(shared) - {os.getpid()}
    alive_gateways = {p for p in others if (shared / f"gauge_livesum_{p}.db").exists()}
    if not alive_gateways:
        (shared / DRAIN_MARKER).unlink(missing_ok=True)
    log.info("gateway metrics in %s (%d other gateway(s) there)", shared, len(alive_gateways))
    return Metrics(shared_dir=shared)


@serve.deployment(name="Gateway", ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class Ingress:
    def __init__(self, predictor: DeploymentHandle, settings: Settings, num_replicas: int):
        from kronos_core.data.store_reader import KlineReader
        from service.preflight import check_ledger

        configure_logging(settings, "gateway")
        check_ledger(settings)  # on the gateways' node: refuse to start with an unwritable ledger
        self.settings = settings
        self.handle = predictor
        self.num_replicas = num_replicas
        self.store = KlineReader(settings.resolved_store_dir())  # the service only reads
        self.metrics = _shared_metrics(settings)
        self.replicas = ServeReplicas(predictor, settings, self.metrics)
        from service.live_accuracy import ledger_service

        self.recorder, self.live = ledger_service(settings, self.store, self.metrics, _replica_id())
        # cut: at the end of the shutdown grace, requests in flight answer what they have (503)
        self.pipeline = ForecastPipeline(
            settings, self.store, self.replicas, self.metrics, num_replicas, recorder=self.recorder,
            cut=lambda: current().lifecycle.wait_cut(), on_info=_note_model_limits,
            live_replicas=lambda: current().replicas_running,
        )
        # before Serve routes a request here: the first one is not the slow one
        warmed = self.pipeline.warm_up()
        log.info(
            "gateway warm-up: prepared %d symbol(s), one of each exchange and session clock",
            len(warmed),
        )
        # (store version, its symbols): listed again when the store publishes a new version
        self._symbols: tuple[int, list[str]] | None = None
        current().start(settings, self.metrics, _replica_id())
        current().describe_model = self.pipeline.info  # the served schema's limits, on demand
        self.metrics.set_limits(
            settings.inflight_limit * settings.gateway_replicas, num_replicas
        )
        # kronos_replicas_ready, probes or not
        self.watch = ReadyWatch(settings.app_name, self.metrics).start()
        if self.live is not None:
            self.live.start()  # background scoring every score_interval_s (one gateway at a time)
        self.metrics_port = None
        if settings.metrics_port is not None:  # /metrics on an internal port (one gateway holds it)
            from service.metrics_port import MetricsPort

            self.metrics_port = MetricsPort(
                settings.host, settings.metrics_port, self.metrics.exposition, CONTENT_TYPE
            ).start()

    # ------------------------------------------------------------ shutdown control (handle calls)
    def __del__(self):
        """Serve stops this replica: its in-flight gauges leave the shared metrics (counts stay),
        its threads stop, the ledger writer writes what is queued (a kill loses only that). Each
        part is closed apart: one that fails is logged and the others still close (a destructor
        that raises is only an unraisable warning, and skips the rest)."""
        # a part is None (or absent) when __init__ failed before making it
        steps = [("metrics", getattr(getattr(self, "metrics", None), "close", None))]
        for name in ("metrics_port", "watch", "live"):
            steps.append((name, getattr(getattr(self, name, None), "stop", None)))
        recorder = getattr(self, "recorder", None)
        if recorder is not None:
            steps.append(("recorder", lambda: recorder.close(timeout_s=5)))
        for name, close in steps:
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - logged; the other parts still close
                log.warning("gateway stop: closing its %s failed (%s: %s)", name,
                            type(exc).__name__, exc)

    async def drain(self) -> int:
        """Stop taking work on every gateway of the node: new requests get 503, /readyz is not
        ready. Returns the requests in flight, summed over the gateways."""
        current().lifecycle.start_drain()
        active = await self.in_flight()
        log.info("gateways draining: %d request(s) in flight", active)
        return active

    async def in_flight(self) -> int:
        """HTTP requests in flight over all gateway replicas of the node."""
        return int(await asyncio.to_thread(self.metrics.total, "kronos_http_requests_in_flight"))

    # ------------------------------------------------------------------ routes
    @api.post(
        "/v1/forecast", response_model=ForecastResponse,
        responses={
            200: {"content": {ARROW_STREAM: {}}},
            422: {"model": UnprocessableOut, "description": "a body or header the service cannot "
                  "run as asked (detail[].loc names it); code deadline_unreachable: planned past "
                  "its deadline (X-Kronos-Timeout-S, else KRONOS_REQUEST_TIMEOUT_S) by more than "
                  "KRONOS_DEADLINE_MARGIN, refused before any work, the plan naming the estimate "
                  "and what would fit"},
            413: {"model": RequestErrorOut, "description": "body above KRONOS_MAX_BODY_BYTES "
                                                           "(refused from Content-Length)"},
            503: {"model": RequestErrorOut, "description": "overloaded (code overloaded) or "
                                                           "shutting down (shutting_down); "
                  "see Retry-After. A request cut at the end of the shutdown grace gets 503 "
                  "shutting_down with the forecasts already made, its other symbols in "
                  "`unanswered` (and in errors as `interrupted`)"},
            504: {"model": RequestErrorOut, "description": "past the request deadline; pending "
                                                           "shards were cancelled"},
            429: {"model": RequestErrorOut, "description": "the key's series/s rate is used up; "
                                                           "see Retry-After"},
            **_KEYS,
        },
    )
    @api.post("/forecast", response_model=ForecastResponse, include_in_schema=False)
    async def forecast(
        self, req: ForecastRequest,
        # a header is absent or text, never null: typed without None (the default says absent), so
        # that its schema admits no null
        accept: Annotated[str, Header()] = None,  # type: ignore[assignment]
        x_kronos_timeout_s: Annotated[
            float,
            Header(
                ge=1, le=86_400,
                description="deadline in seconds (1 or more), at most KRONOS_MAX_REQUEST_TIMEOUT_S "
                "(default: KRONOS_REQUEST_TIMEOUT_S); a request planned past it by more than "
                "KRONOS_DEADLINE_MARGIN is refused at once (422 deadline_unreachable)",
            ),
        ] = None,  # type: ignore[assignment]
        # FastAPI passes it; None when called directly
        request: Request = None,  # type: ignore[assignment]
    ) -> Response:
        scope_state = request.scope.setdefault("state", {}) if request is not None else {}
        key = scope_state.get("api_key")
        scope_state["symbols"] = req.n_series
        wait = current().keyring.throttle(key, req.n_series)
        if wait > 0:
            raise RateLimited(
                f"rate limit of key {key.name!r} ({key.series_per_s:g} series/s) reached",
                max(1, math.ceil(wait)),
            )
        timeout: float = self.settings.request_timeout_s
        source: Source = "default"
        if x_kronos_timeout_s is not None:  # the client's own, up to the longest the service gives
            timeout, source = min(self.settings.longest_timeout_s, x_kronos_timeout_s), "request"
        # the wait for a slot (service.admission) is part of the deadline
        timeout = max(0.001, timeout - scope_state.get("queued_s", 0.0))
        rid = request_id_of(request.scope) if request is not None else None
        # a ServiceError: answered by _service_error
        out = await self.pipeline.forecast(req, timeout_s=timeout, request_id=rid,
                                           timeout_source=source)
        scope_state["timing"] = out.timing
        unanswered = [e["symbol"] for e in out.errors if e["code"] == ErrorCode.INTERRUPTED]
        if unanswered:  # cut at shutdown: what was answered, and a coded 503 naming the rest
            response = _json(
                cut_answer(out, unanswered), 503,
                {"Retry-After": str(self.settings.retry_after_s), "Connection": "close"},
            )
            scope_state["error_code"] = ErrorCode.SHUTTING_DOWN.value
            self.metrics.record_error(ErrorCode.SHUTTING_DOWN)
        elif accept and ARROW_STREAM in accept:
            response = Response(answer_to_arrow(out), media_type=ARROW_STREAM,
                                headers={"X-Kronos-Errors": str(len(out.errors))})
        else:
            response = _json(answer_to_json(out))
        # to the ledger once the answer is sent
        response.background = BackgroundTask(self.pipeline.record, out)
        return response

    @api.get("/v1/models", response_model=ModelsResponse, responses={503: _SHUTTING_DOWN, **_KEYS})
    async def models(self) -> Response:
        try:
            info = (await self.pipeline.info()).model
        except RayActorError:
            return _json({"detail": "no predictor replica is running yet; try again shortly"}, 503,
                         {"Retry-After": str(self.settings.retry_after_s)})
        return _json({"models": [info]})

    @api.get("/v1/symbols", response_model=SymbolsPage, responses={503: _SHUTTING_DOWN, **_KEYS})
    async def symbols(
        self,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_SYMBOL_OFFSET)] = 0,
    ) -> Response:
        listed = await asyncio.to_thread(self._symbol_list)
        version, symbols = listed
        page = symbols[offset: offset + limit]
        return _json({"symbols": page, "total": len(symbols), "limit": limit, "offset": offset,
                      "store_version": version})

    def _symbol_list(self) -> tuple[int, list[str]]:
        """The current store version's symbols: cached per version (one stat of the manifest
        to check); an unversioned store (version 0) is listed on every call."""
        version = int(getattr(self.store, "version", 0))
        cached = self._symbols
        if cached is not None and cached[0] == version and version > 0:
            return cached
        for _ in range(3):  # an import published between the two reads: list again
            symbols = self.store.symbols()
            after = int(getattr(self.store, "version", 0))
            if after == version:
                break
            version = after
        self._symbols = (version, symbols)
        return self._symbols

    @api.get("/v1/candles", response_model=CandlesResponse,
             responses={404: _NO_CANDLES, 503: _SHUTTING_DOWN, **_KEYS})
    async def candles(
        self,
        symbol: Annotated[str, Query(min_length=1, max_length=64)],
        before: Annotated[
            int, Query(ge=1, le=MAX_LOOKBACK, description="candles at or before as_of")
        ] = 256,
        after: Annotated[
            int,
            Query(ge=0, le=MAX_HORIZON, description="candles after as_of (with as_of only)"),
        ] = 0,
        as_of: Annotated[
            QueryDateTime,
            Query(description="the last candle of the history (ISO 8601; naive = the symbol's "
                              f"wall clock; years {STORE_YEARS[0]} to {STORE_YEARS[1]}, else a "
                              "422); default: the latest"),
        ] = None,  # type: ignore[assignment]
        frequency: Annotated[
            str, Query(pattern=r"^[A-Za-z0-9]{1,16}$", description="store frequency folder")
        ] = None,  # type: ignore[assignment]
    ) -> Response:
        """The stored candles of one symbol around a forecast's start: the history (what a
        forecast ``as_of`` the same time reads) and the actual candles that followed ``as_of``.
        A symbol the store cannot give: 404 with the store's reason. Key scope: ``candles``."""
        return _json(await asyncio.to_thread(
            candles_answer, self.store, symbol, before, after, as_of, frequency
        ))

    @api.get("/v1/accuracy", response_model=AccuracyResponse,
             responses=cast(dict[int | str, dict[str, Any]], {
                 404: {"model": RequestErrorOut, "description": "the forecast ledger is off (code "
                                                                "ledger_off)"},
                 503: {"model": RequestErrorOut, "description": "shutting down (shutting_down), or "
                                                                "the ledger "
                       "cannot be read (ledger_unavailable)"},
                 **_KEYS}))
    async def accuracy(
        self,
        # a query parameter is absent or text, never null: typed without None (the default says
        # absent), so that its schema admits no null (as the forecast route's headers)
        model: Annotated[
            str,
            Query(
                min_length=1, max_length=128,
                description="model name or sha256 (default: every model)",
            ),
        ] = None,  # type: ignore[assignment]
        symbol: Annotated[str, Query(min_length=1, max_length=64)] = None,  # type: ignore[assignment]
        since: Annotated[
            QueryDateTime,
            Query(description="only forecasts made at or after this time (ISO 8601; naive = UTC; "
                              f"years {STORE_YEARS[0]} to {STORE_YEARS[1]}, else a 422)"),
        ] = None,  # type: ignore[assignment]
        horizon_step: Annotated[
            int,
            Query(
                ge=1, le=MAX_HORIZON, description="only this step (1: the first forecast candle)"
            ),
        ] = None,  # type: ignore[assignment]
    ) -> Response:
        """Live accuracy of the recorded forecasts whose truth has arrived: scored steps, coverage
        per central level, CRPS and MAE of the close, over the rolling window and all time. With
        the ledger off: 404 ``ledger_off``; a ledger that cannot be read: 503
        ``ledger_unavailable``."""
        if self.live is None:
            raise LedgerOff(
                "the forecast ledger is off (KRONOS_LEDGER_DIR=off): nothing is recorded or scored"
            )
        try:
            return _json(
                await asyncio.to_thread(self.live.answer, model, symbol, since, horizon_step)
            )
        except Exception as exc:  # noqa: BLE001 - never a 500: logged here, coded for the client
            log.exception("GET /v1/accuracy: the ledger could not be read")
            raise LedgerUnavailable(
                f"the forecast ledger cannot be read ({type(exc).__name__}: "
                f"{self.pipeline.public(str(exc))}); see the gateway log and docs/operations.md, "
                "'Ledger failing'",
                self.settings.retry_after_s,
            ) from None

    @api.get("/healthz")
    async def healthz(self) -> Response:
        return _json({"status": "ok"})

    @api.get("/readyz", response_model=Readiness,
             responses={503: {"model": Readiness, "description": "not ready: no replica yet, or "
                                                                 "shutting down"}})
    async def readyz(self) -> Response:
        if current().lifecycle.is_draining():
            return _json({"ready": False, "replicas_ready": 0, "replicas_target": self.num_replicas,
                          "detail": "shutting down"}, 503)
        running, detail = 0, ""
        try:
            running = await asyncio.to_thread(running_replicas, self.settings.app_name)
            current().replicas_running = running  # what a request's plan counts
        except Exception as exc:  # controller busy: fall back to the probe alone
            detail = f"serve.status failed: {exc}"
        ready = False
        status_known = not detail
        try:
            info = await asyncio.wait_for(self.handle.describe.remote(), timeout=10)
            self.pipeline.remember(info)
            self.metrics.touch_replica(info.replica_id)
            ready = running >= 1 or not status_known
        except Exception as exc:
            detail = f"no replica answered: {type(exc).__name__}"
        self.metrics.replicas_ready.set(running)
        body = {"ready": ready, "replicas_ready": running, "replicas_target": self.num_replicas,
                "detail": self.pipeline.public(detail)}
        return _json(body, 200 if ready else 503)

    @api.get("/metrics", include_in_schema=False)
    async def metrics_endpoint(self) -> Response:
        held = self.metrics_port
        if self.settings.metrics_port is not None and not (held and held.conflict):
            return _json(
                {
                    "detail": "/metrics is served on the internal port "
                              f"{self.settings.metrics_port} "
                    "(KRONOS_METRICS_PORT)"
                },
                404,
            )
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)


def _cluster_gpus() -> int:
    import ray

    if ray.is_initialized():
        return int(ray.cluster_resources().get("GPU", 0))
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # pragma: no cover
        return 0


def build_app(args: Settings) -> serve.Application:
    """Typed app builder: ``serve run service.app:build_app model_dir=...`` or a Serve config's
    ``args``.

    Unset fields come from ``KRONOS_*`` environment variables, then the defaults.
    """
    from pydantic import ValidationError

    from service.common.settings import describe_settings_error
    from service.preflight import StartupError, check_startup

    try:
        settings = args if isinstance(args, Settings) else Settings(**dict(args or {}))
    except ValidationError as exc:  # named by variable, without pydantic's URL
        raise StartupError(f"invalid settings: {describe_settings_error(exc)}") from None
    # a Serve config or `serve run` (kronos serve warned already)
    if not isinstance(args, Settings):
        for message in unknown_kronos_variables():
            log.warning(message)
    # a public bind without keys: refused (StartupError) before any replica (the ledger: each
    # gateway)
    check_startup(settings, announce=not isinstance(args, Settings))
    gpus = _cluster_gpus()
    replicas = settings.resolved_num_replicas(gpus)
    gpu = settings.use_gpu(gpus)
    if gpu:
        actor_opts: dict[str, float] = {"num_gpus": 1, "num_cpus": 1}
    else:
        cpus = settings.resolved_replica_cpus(replicas)
        actor_opts = {"num_cpus": cpus}
        settings = settings.model_copy(update={"replica_cpus": cpus})
    # the gateways' slots, from the replicas when unset (Settings.resolved_max_inflight)
    inflight = settings.resolved_max_inflight(replicas, gpu, settings.replica_cpus or 1)
    settings = settings.model_copy(update={"max_inflight_requests": inflight})
    # a model folder of this node reaches the replicas on every node through the object store
    shipped = ship_weights(settings)
    # @serve.deployment makes the class a ray Deployment; mypy does not apply class decorators
    predictor = Predictor.options(  # type: ignore[attr-defined]
        num_replicas=replicas,
        ray_actor_options=actor_opts,
        max_ongoing_requests=settings.replica_max_ongoing,
        max_queued_requests=settings.replica_max_queued,
        graceful_shutdown_timeout_s=settings.shutdown_grace_s,
    ).bind(settings, shipped)
    gateway_opts: dict = {"num_cpus": 0}
    # pin every gateway to the node that has it (they share metric files)
    if settings.gateway_resource:
        gateway_opts["resources"] = {settings.gateway_resource: 0.001}
    # a Deployment too (see Predictor above)
    ingress = Ingress.options(  # type: ignore[attr-defined]
        num_replicas=settings.gateway_replicas,
        ray_actor_options=gateway_opts,
        # beyond: the gateway answers 503 itself
        max_ongoing_requests=settings.inflight_limit + settings.max_queued_requests + 64,
        # Serve (KubeRay) lets requests finish
        graceful_shutdown_timeout_s=settings.shutdown_grace_s,
    )
    return ingress.bind(predictor, settings, replicas)


__all__ = ["api", "build_app", "Ingress"]
