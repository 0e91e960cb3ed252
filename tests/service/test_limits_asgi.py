"""The body-limit middleware called directly as an ASGI app: a body declared above the limit
is answered 413 without ``receive`` ever being called (not a byte of it is read), and the app
behind it never runs. (tests/service/test_limits.py checks the same through a TestClient,
where a version that read the whole body first and then answered 413 would still pass.)"""

from __future__ import annotations

import asyncio

import orjson

from service.limits import BodyLimitMiddleware, Limits


class _Recorder:
    """``receive`` and ``send`` of one request, recording every call; and the app behind the
    middleware, recording whether it ran."""

    def __init__(self, body: bytes):
        self.body = body
        self.received: list[dict] = []
        self.sent: list[dict] = []
        self.app_ran = False

    async def receive(self) -> dict:
        message = {"type": "http.request", "body": self.body, "more_body": False}
        self.received.append(message)
        return message

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    async def app(self, scope, receive, send) -> None:
        self.app_ran = True
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _call(limit: int, declared: int, body: bytes) -> _Recorder:
    rec = _Recorder(body)
    scope = {
        "type": "http", "method": "POST", "path": "/v1/forecast",
        "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(declared).encode()),
        ],
    }
    asyncio.run(BodyLimitMiddleware(rec.app, Limits(limit))(scope, rec.receive, rec.send))
    return rec


def test_declared_length_above_the_limit_is_413_without_a_receive_call():
    rec = _call(limit=1024, declared=128 * 1024 * 1024, body=b"x" * 2048)
    assert rec.received == []  # receive never called: the body was not read
    assert not rec.app_ran
    start, body = rec.sent
    assert start["type"] == "http.response.start" and start["status"] == 413
    assert (b"connection", b"close") in start["headers"]
    answer = orjson.loads(body["body"])
    assert answer["code"] == "too_large" and f"{128 * 1024 * 1024} bytes" in answer["detail"]


def test_declared_length_at_the_limit_reaches_the_app_which_reads_the_body():
    rec = _call(limit=1024, declared=1024, body=b"x" * 1024)
    assert rec.app_ran and len(rec.received) == 1
    assert rec.sent[0]["status"] == 200
