"""Body limit (413 from Content-Length before the body is read; chunked bodies counted while
they stream) and the request deadline (504 material, pending shards cancelled)."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from service_fakes import FakeStore, fake_future, fake_info
from starlette.exceptions import HTTPException

from service.common.errors import DeadlineExceeded
from service.common.messages import ShardResult
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.future import FutureTimestamps
from service.limits import BodyLimitMiddleware, Limits
from service.responses import error_response


def _app(limit: int, reads: list[int]):
    app = FastAPI()
    app.add_middleware(BodyLimitMiddleware, limits=Limits(limit))

    @app.exception_handler(HTTPException)
    async def _h(request, exc):
        from fastapi.responses import JSONResponse

        return JSONResponse({"detail": exc.detail}, exc.status_code)

    @app.post("/echo")
    async def echo(request: Request):
        body = await request.body()
        reads.append(len(body))
        return {"n": len(body)}

    return app


def test_declared_length_above_the_limit_is_413_before_the_body_is_read():
    reads: list[int] = []
    client = TestClient(_app(1000, reads))
    r = client.post("/echo", content=b"x" * 1001)
    assert r.status_code == 413 and r.json()["code"] == "too_large"
    assert "1001 bytes" in r.json()["detail"] and "KRONOS_MAX_BODY_BYTES" in r.json()["detail"]
    assert reads == []  # the route never ran
    assert client.post("/echo", content=b"x" * 1000).json() == {"n": 1000}


def test_chunked_body_is_cut_off_while_streaming():
    reads: list[int] = []
    client = TestClient(_app(1000, reads))
    sent = []

    def chunks():
        for _ in range(50):
            sent.append(100)
            yield b"y" * 100

    r = client.post("/echo", content=chunks())  # no Content-Length: chunked
    assert r.status_code == 413 and reads == []
    ok = client.post("/echo", content=iter([b"z" * 400, b"z" * 400]))
    assert ok.status_code == 200 and ok.json() == {"n": 800}


def test_default_limit_fits_a_thousand_inline_series_of_512_candles():
    import json

    row = [
        "2024-03-01T09:30:00", 123.456789, 124.456789, 122.456789, 123.956789, 12345.678,
        1523456.789,
    ]
    one = json.dumps({"symbol": "SYM0000", "candles": [row] * 512})
    size = 1000 * (len(one) + 2) + 32  # {"series": [one, one, ...], "horizon": 16}
    assert size < Settings().max_body_bytes < 4 * size


class _SlowReplicas:
    def __init__(self, delay: float):
        self.delay, self.started, self.cancelled, self.finished = delay, 0, 0, 0

    async def forecast_shard(self, shard):
        self.started += 1
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return ShardResult(shard.request_id, shard.index, "slow", None, None, None, error="unused")

    async def describe(self):
        return fake_info()


def test_deadline_cancels_pending_shards():
    reps = _SlowReplicas(delay=300)
    m = Metrics()
    # 2 s: time enough, even on a loaded box, for the gateway to hand shards to the (never
    # answering) replicas before the deadline, so there is running work to cancel
    gw = ForecastPipeline(
        Settings(max_context=64, request_timeout_s=2.0), FakeStore(), reps, m, num_replicas=2,
        fit_factory=lambda info, h, sc: lambda L: 2, future=FutureTimestamps(fake_future),
    )
    req = ForecastRequest(symbols=[f"S{i:03d}" for i in range(12)], horizon=2)

    async def run():
        with pytest.raises(DeadlineExceeded, match="2 s deadline") as ei:
            await gw.forecast(req)
        error_response(ei.value, m)  # what the app's exception handler does with it
        await asyncio.sleep(0)
        return gw.dispatcher.shards_in_flight, gw._inflight

    shards_left, requests_left = asyncio.run(run())
    assert reps.started >= 1 and reps.cancelled == reps.started and reps.finished == 0
    assert shards_left == 0 and requests_left == 0
    assert m.registry.get_sample_value("kronos_errors_total", {"code": "deadline_exceeded"}) == 1
    # a shorter per-request deadline wins over the setting
    gw.settings = gw.settings.model_copy(update={"request_timeout_s": 60})
    with pytest.raises(DeadlineExceeded, match="0.2 s"):
        asyncio.run(gw.forecast(req, timeout_s=0.2))
