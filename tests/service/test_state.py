"""The gateway process's one state object (``service.state``): the ingress fills it from its
settings, and the app's middlewares and exception handlers read it at each request."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import service.state
from service.auth import hash_key
from service.common.errors import Overloaded, ServiceError
from service.common.metrics import Metrics
from service.common.settings import Settings
from service.state import ProcessState, current


@pytest.fixture
def fresh_state(monkeypatch) -> ProcessState:
    """A new ProcessState as this process's, for one test."""
    state = ProcessState()
    monkeypatch.setattr(service.state, "_STATE", state)
    return state


def test_start_fills_every_part_from_the_settings(fresh_state, tmp_path):
    assert (
        current() is fresh_state and fresh_state.metrics is None and not fresh_state.keyring.enabled
    )
    metrics = Metrics(shared_dir=None)
    settings = Settings(max_body_bytes=1234, retry_after_s=9,
                        api_keys=f"{hash_key('k')} alice forecast 5")
    fresh_state.start(settings, metrics, "gw-7")
    assert current().metrics is metrics and current().gateway_id == "gw-7"
    assert current().limits.max_body_bytes == 1234
    assert (
        current().lifecycle.retry_after_s == 9
        and current().lifecycle.gauge is metrics.http_in_flight
    )
    assert current().keyring.enabled and current().keyring.lookup("k").name == "alice"


def test_the_app_reads_the_state_at_each_request(fresh_state):
    pytest.importorskip("ray.serve")
    from fastapi.testclient import TestClient

    from service.app import api

    client = TestClient(api)
    assert "X-Kronos-Gateway" not in client.get("/healthz-nope").headers  # not started: no id
    fresh_state.gateway_id, fresh_state.metrics = "gw-1", Metrics()
    r = client.get("/healthz-nope")
    assert r.status_code == 404 and r.headers["X-Kronos-Gateway"] == "gw-1"
    seen = fresh_state.metrics.registry.get_sample_value(
        "kronos_request_duration_seconds_count",
        {"route": "unmatched", "method": "GET", "status": "404"},
    )
    assert seen == 1
    fresh_state.limits.max_body_bytes = 10
    r = client.post("/v1/forecast", content=b"x" * 11)
    assert r.status_code == 413 and r.json()["code"] == "too_large"
    # a ServiceError a route raises: answered by the app's one handler, counted in this state's
    # metrics
    resp = asyncio.run(api.exception_handlers[ServiceError](None, Overloaded("queues are full", 3)))
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "3"
    assert orjson.loads(resp.body) == {"detail": "queues are full", "code": "overloaded"}
    assert (
        fresh_state.metrics.registry.get_sample_value("kronos_errors_total", {"code": "overloaded"})
        == 1
    )
    fresh_state.lifecycle.draining = True
    r = client.get("/healthz-nope")
    assert r.status_code == 503 and r.json()["code"] == "shutting_down"


def test_start_reads_the_admission_settings_into_the_gate(fresh_state):
    """Issue 52 (a missed plant): each admission setting reaches the gateway's gate."""
    settings = Settings(max_inflight_requests=3, max_queued_requests=5, queue_wait_s=1.5,
                        retry_after_s=7, request_timeout_s=90)
    fresh_state.start(settings, Metrics(shared_dir=None), None)
    gate = current().admission
    assert (gate.limit, gate.queue, gate.max_wait_s, gate.retry_after_s) == (3, 5, 1.5, 7)
    assert current().request_timeout_s == 90
    # and a refusal is counted as overloaded
    gate.on_refuse()
    assert current().metrics.registry.get_sample_value(
        "kronos_errors_total", {"code": "overloaded"}
    ) == 1


def test_a_gateway_asks_for_the_models_limits_before_serving_its_schema(fresh_state):
    """Issue 52's fresh clone: Schemathesis read /openapi.json from a gateway that no request
    or probe had reached yet, got the static horizon ceiling (512), and sent 511 to a
    256-candle model: a 422 for a request its schema allowed. Such a gateway now asks a replica
    first; with none answering it serves the static ceiling."""
    pytest.importorskip("ray.serve")
    from fastapi.testclient import TestClient

    from service.app import _note_model_limits, api

    asked: list[int] = []

    async def describe():
        asked.append(1)
        _note_model_limits(type("Info", (), {"max_context": 256})())

    client = TestClient(api)
    assert client.get("/openapi.json").json()["components"]["schemas"]["ForecastRequest"][
        "properties"]["horizon"]["maximum"] == 512  # no ingress yet: the static ceiling
    fresh_state.describe_model = describe
    for _ in range(2):
        schema = client.get("/openapi.json").json()
        assert schema["components"]["schemas"]["ForecastRequest"]["properties"]["horizon"][
            "maximum"] == 256
    assert asked == [1]  # once: the limits are then known

    async def no_replica():
        raise TimeoutError

    fresh_state.max_horizon, fresh_state.describe_model = None, no_replica
    schema = client.get("/openapi.json").json()
    assert schema["components"]["schemas"]["ForecastRequest"]["properties"]["horizon"][
        "maximum"] == 512
