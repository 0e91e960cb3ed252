"""The ingress's replica calls (``service.app.Ingress``) against a fake Serve handle that raises
Ray's own exceptions: a full replica queue (``BackPressureError``) answers 503 with Retry-After,
a dead replica (``ActorDiedError``) is retried then reported per symbol, and a cancelled request
cancels its Ray call. No Ray cluster runs here; tests/integration/ runs the real one."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from service_fakes import FakePredictor, FakeStore, fake_future, fake_info, make_shard, run_shards

pytest.importorskip("ray.serve")

from ray.exceptions import ActorDiedError  # noqa: E402
from ray.serve.exceptions import BackPressureError  # noqa: E402

from service.app import Ingress  # noqa: E402
from service.common.errors import Overloaded, ReplicaGone, ServiceError  # noqa: E402
from service.common.metrics import Metrics  # noqa: E402
from service.common.schemas import ForecastRequest  # noqa: E402
from service.common.settings import Settings  # noqa: E402
from service.gateway import ForecastPipeline  # noqa: E402
from service.gateway.future import FutureTimestamps  # noqa: E402
from service.replica.step_runner import StepRunner  # noqa: E402
from service.responses import error_response  # noqa: E402
from service.serve_replicas import ServeReplicas  # noqa: E402


class FakeResponse:
    """A ``DeploymentResponse``: awaitable once, ``cancel()`` records the cancellation."""

    def __init__(self, outcome):
        self.outcome = outcome  # an exception to raise, a coroutine function to await, or a value
        self.cancelled = False

    def cancel(self):
        self.cancelled = True

    def __await__(self):
        return self._run().__await__()

    async def _run(self):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if callable(self.outcome):
            return await self.outcome()
        return self.outcome


class FakeMethod:
    def __init__(self, answer):
        self.answer = answer  # callable(*args) -> outcome
        self.responses: list[FakeResponse] = []

    def remote(self, *args):
        r = FakeResponse(self.answer(*args))
        self.responses.append(r)
        return r


class FakeHandle:
    """``handle.forecast_shard.remote(shard)`` and ``handle.describe.remote()``."""

    def __init__(self, forecast_answer):
        self.forecast_shard = FakeMethod(forecast_answer)
        self.describe = FakeMethod(lambda: fake_info(max_context=64))


def _ingress(handle: FakeHandle, **settings) -> Ingress:
    """An Ingress without Ray: the real class and methods, its fields set by hand."""
    # the user class under Serve's ASGI wrapper (whose async __del__ expects a running replica)
    cls = next(c for c in Ingress.func_or_class.__mro__ if "forecast" in c.__dict__)
    ing = object.__new__(cls)
    ing.settings = Settings(
        **{
            "max_context": 64, "shards_per_replica": 2, "min_shard_tokens": 0, "retry_after_s": 7,
            **settings,
        }
    )
    ing.handle = handle
    ing.num_replicas = 2
    ing.metrics = Metrics()
    ing.store = FakeStore()
    ing._symbols = None
    ing.replicas = ServeReplicas(handle, ing.settings, ing.metrics)
    ing.pipeline = ForecastPipeline(
        ing.settings, ing.store, ing.replicas, ing.metrics, 2,
        fit_factory=lambda info, h, sc: lambda L: 3, future=FutureTimestamps(fake_future),
    )
    return ing


def _run_shard(shard):
    results, reports = run_shards(StepRunner(FakePredictor(), "fake-replica", "cpu"), [shard])
    results[0].reports = reports
    return results[0]


def _errors(ing: Ingress, code: str) -> float:
    return ing.metrics.registry.get_sample_value("kronos_errors_total", {"code": code}) or 0.0


async def _answer(ing: Ingress, req: ForecastRequest):
    """The forecast route's answer as a client gets it: a ``ServiceError`` it raises answered by
    the app's exception handler (``error_response``)."""
    try:
        return await ing.forecast(req, accept=None)
    except ServiceError as exc:
        return error_response(exc, ing.metrics)


REQ = ForecastRequest(symbols=[f"S{i:03d}" for i in range(8)], horizon=2)


def test_full_replica_queue_is_503_with_retry_after():
    handle = FakeHandle(
        lambda shard: BackPressureError(num_queued_requests=64, max_queued_requests=64)
    )
    ing = _ingress(handle)
    resp = asyncio.run(_answer(ing, REQ))
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "7"
    body = orjson.loads(resp.body)
    assert body["code"] == "overloaded" and "queues are full" in body["detail"]
    assert _errors(ing, "overloaded") >= 1
    with pytest.raises(Overloaded):  # the translation itself, shard by shard
        asyncio.run(ing.replicas.forecast_shard(make_shard(1)))


def test_dead_replica_is_retried_then_answered():
    calls = []

    def answer(shard):
        calls.append(shard.index)
        return ActorDiedError() if len(calls) <= 2 else _run_shard(shard)

    ing = _ingress(FakeHandle(answer))
    resp = asyncio.run(_answer(ing, REQ))
    assert resp.status_code == 200
    body = orjson.loads(resp.body)
    assert [f["symbol"] for f in body["forecasts"]] == REQ.symbols and body["errors"] == []
    assert body["timing"]["shard_retries"] == 2


def test_replica_that_stays_dead_gives_per_symbol_errors():
    ing = _ingress(FakeHandle(lambda shard: ActorDiedError()), shard_retries=1)
    with pytest.raises(ReplicaGone, match="ActorDiedError"):
        asyncio.run(ing.replicas.forecast_shard(make_shard(1)))
    resp = asyncio.run(_answer(ing, REQ))
    body = orjson.loads(resp.body)
    assert resp.status_code == 200 and body["forecasts"] == []
    assert [e["symbol"] for e in body["errors"]] == REQ.symbols
    assert {e["code"] for e in body["errors"]} == {"replica_unavailable"}


def test_cancelled_request_cancels_the_ray_call():
    """The client left: the ingress task is cancelled, and each shard's Ray call with it."""
    gate = asyncio.Event

    async def never():
        await gate().wait()

    handle = FakeHandle(lambda shard: never)
    ing = _ingress(handle)

    async def main():
        task = asyncio.ensure_future(ing.forecast(REQ, accept=None))
        deadline = asyncio.get_running_loop().time() + 30
        while len(handle.forecast_shard.responses) < 4:
            assert asyncio.get_running_loop().time() < deadline, "shards never reached the handle"
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    sent = handle.forecast_shard.responses
    # 8 series in shards of 2 (2 replicas x 2 shards each); 2 x 2 in flight: all sent
    assert len(sent) == 4
    assert all(r.cancelled for r in sent)
    assert ing.pipeline.dispatcher.shards_in_flight == 0


def test_request_the_deployment_cannot_run_is_422_naming_the_field():
    ing = _ingress(FakeHandle(_run_shard), max_symbols=2)
    resp = asyncio.run(_answer(ing, REQ))
    assert resp.status_code == 422
    detail = orjson.loads(resp.body)["detail"]
    assert (
        len(detail) == 1
        and detail[0]["loc"] == ["body", "symbols"]
        and detail[0]["type"] == "value_error"
    )
    assert "at most 2" in detail[0]["msg"]
    assert _errors(ing, "invalid_request") == 1


def test_a_request_planned_past_its_deadline_is_a_422_at_once_naming_the_plan():
    """Issue 53, the route's answer as a client gets it (``error_response``): 422 in the 422 shape
    with ``code`` and ``plan``, counted, and no shard sent to a replica."""
    from kronos_core.loading import DEFAULT_MODEL_DIR
    from kronos_core.plan import roofline as R
    from kronos_core.plan.planner import resolve_model

    model = resolve_model(str(DEFAULT_MODEL_DIR))
    info = fake_info(max_context=model.max_context)
    info.model_cfg, info.tokenizer_cfg = model.model, model.tokenizer
    info.speed = R.Device("cpu", 2**34, 92e9, 2.3e9, 24e9, 0.0, "test", op_overhead_s=1.5e-6,
                          compute_eff=1.0, memory_eff=1.0)
    handle = FakeHandle(_run_shard)
    handle.describe = FakeMethod(lambda: info)
    ing = _ingress(handle, max_context=256)
    big = ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=100, sample_count=100)

    async def answer():
        try:
            return await ing.forecast(big, accept=None, x_kronos_timeout_s=2.0,
                                      request=_route_request({}))
        except ServiceError as exc:
            return error_response(exc, ing.metrics)

    resp = asyncio.run(answer())
    assert resp.status_code == 422
    body = orjson.loads(resp.body)
    assert body["code"] == "deadline_unreachable"
    (entry,) = body["detail"]
    assert entry["loc"] == ["header", "x-kronos-timeout-s"]
    assert entry["type"] == "deadline_unreachable" and entry["msg"].startswith("planned ")
    plan = body["plan"]
    assert plan["deadline_s"] == 2.0 and plan["series"] == 20 and plan["lanes"] == 2
    assert plan["planned_s"] > 1.5 * 2.0 and set(plan["fits"]) == {
        "symbols", "sample_count", "horizon", "timeout_s"}
    assert f"{plan['fits']['timeout_s']} or more" in entry["msg"]
    assert _errors(ing, "deadline_unreachable") == 1 and _errors(ing, "invalid_request") == 0
    assert handle.forecast_shard.responses == []  # refused before any shard was sent
    # the same request with a deadline it fits in runs
    ok = asyncio.run(ing.forecast(big.model_copy(update={"symbols": ["S001"], "horizon": 2,
                                                         "sample_count": 1}),
                                  accept=None, x_kronos_timeout_s=2.0,
                                  request=_route_request({})))
    assert ok.status_code == 200
    assert orjson.loads(ok.body)["deadline"]["source"] == "request"


def test_openapi_declares_the_deadline_refusal():
    from service.app import api

    schema = api.openapi()
    post = schema["paths"]["/v1/forecast"]["post"]
    assert post["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/UnprocessableOut"}
    assert "deadline_unreachable" in post["responses"]["422"]["description"]
    props = schema["components"]["schemas"]["UnprocessableOut"]["properties"]
    assert {"detail", "code", "plan"} <= set(props)
    assert schema["components"]["schemas"]["UnprocessableOut"]["required"] == ["detail"]
    header = next(p for p in post["parameters"] if p["name"].lower() == "x-kronos-timeout-s")
    assert "KRONOS_MAX_REQUEST_TIMEOUT_S" in header["description"]
    answer = schema["components"]["schemas"]["ForecastResponse"]["properties"]
    assert "deadline" in answer


def _route_request(state: dict):
    """A Starlette request for the forecast route, its scope's state as the middlewares left it."""
    from starlette.requests import Request

    return Request({"type": "http", "method": "POST", "path": "/v1/forecast", "headers": [],
                    "state": state})


def test_the_time_queued_is_taken_off_the_requests_deadline(monkeypatch):
    """Issue 52 (a missed plant): a request that waited 40 s for a slot (``queued_s``, set by
    ``service.admission``) has the rest of its deadline, from the setting or its header."""
    ing = _ingress(FakeHandle(_run_shard), request_timeout_s=100)
    deadlines: list[tuple[float, str]] = []
    real = ing.pipeline.forecast

    async def forecast(req, timeout_s=None, request_id=None, timeout_source="default"):
        deadlines.append((timeout_s, timeout_source))
        return await real(req, timeout_s=timeout_s, request_id=request_id,
                          timeout_source=timeout_source)

    monkeypatch.setattr(ing.pipeline, "forecast", forecast)
    small = ForecastRequest(symbols=["S000"], horizon=2, record=False)
    r = asyncio.run(ing.forecast(small, accept=None, request=_route_request({"queued_s": 40.0})))
    assert r.status_code == 200 and deadlines == [(60.0, "default")]
    asyncio.run(ing.forecast(small, accept=None, x_kronos_timeout_s=50.0,
                             request=_route_request({"queued_s": 10.0})))
    assert deadlines[-1] == (40.0, "request")
    asyncio.run(ing.forecast(small, accept=None, request=_route_request({})))  # not queued
    assert deadlines[-1] == (100.0, "default")
    # a header past the default is cut to it: the operator allows no longer deadline ...
    asyncio.run(ing.forecast(small, accept=None, x_kronos_timeout_s=500.0,
                             request=_route_request({})))
    assert deadlines[-1] == (100.0, "request")
    # ... unless KRONOS_MAX_REQUEST_TIMEOUT_S does, up to it
    ing.settings = ing.settings.model_copy(update={"max_request_timeout_s": 400.0})
    asyncio.run(ing.forecast(small, accept=None, x_kronos_timeout_s=500.0,
                             request=_route_request({})))
    assert deadlines[-1] == (400.0, "request")


def test_a_key_past_its_rate_is_429_with_retry_after(monkeypatch):
    """Issue 52 (a missed plant): the per-key rate limit at the route, without Ray or HTTP:
    a key of 0.01 series/s (burst 10 s: 0.1 series) runs one request (a bucket may go into debt,
    so that a portfolio is never refused forever), then is refused 429 ``rate_limited`` with the
    ~90 s its bucket needs to refill, and another key is not held back."""
    import service.state
    from service.auth import KeyRing, parse_keys
    from service.common.errors import RateLimited
    from service.state import ProcessState

    state = ProcessState()
    state.keyring = KeyRing(parse_keys(f"{'a' * 64} slow forecast 0.01\n{'b' * 64} free forecast -",
                                       "test"), burst_s=10.0)
    monkeypatch.setattr(service.state, "_STATE", state)
    slow, free = state.keyring.keys["a" * 64], state.keyring.keys["b" * 64]
    ing = _ingress(FakeHandle(_run_shard))
    twenty = ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=2, record=False)
    one = ForecastRequest(symbols=["S000"], horizon=2, record=False)
    r = asyncio.run(ing.forecast(one, accept=None, request=_route_request({"api_key": slow})))
    assert r.status_code == 200
    with pytest.raises(RateLimited) as refused:
        asyncio.run(ing.forecast(one, accept=None, request=_route_request({"api_key": slow})))
    resp = error_response(refused.value, ing.metrics)
    assert resp.status_code == 429 and orjson.loads(resp.body)["code"] == "rate_limited"
    assert "slow" in orjson.loads(resp.body)["detail"]
    assert 80 <= int(resp.headers["Retry-After"]) <= 90  # 0.9 series of debt at 0.01/s
    r = asyncio.run(ing.forecast(twenty, accept=None, request=_route_request({"api_key": free})))
    assert r.status_code == 200


def test_stopping_a_gateway_closes_every_part_even_when_one_fails(caplog):
    """Issue 52: ``Ingress.__del__`` raised "'Broken' object has no attribute 'stop'" (an
    unraisable-exception warning) for a ``live`` without ``stop``, and would have skipped the
    ledger writer after it. Each part is closed apart: one that fails is logged, the rest close."""
    import logging

    ing = _ingress(FakeHandle(_run_shard))
    closed: list[str] = []

    class Part:
        def __init__(self, name, fails=False):
            self.name, self.fails = name, fails

        def stop(self):
            if self.fails:
                raise RuntimeError(f"{self.name} would not stop")
            closed.append(self.name)

    class Recorder:
        def close(self, timeout_s):
            closed.append(f"recorder {timeout_s}")

    ing.metrics_port, ing.watch = Part("metrics_port"), Part("watch", fails=True)
    ing.live = object()  # a part without stop: nothing to stop
    ing.recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="service.app"):
        ing.__del__()
    assert closed == ["metrics_port", "recorder 5"]
    assert "closing its watch failed (RuntimeError: watch would not stop)" in caplog.text
