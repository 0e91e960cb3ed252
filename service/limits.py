"""Request body limit: a pure ASGI middleware in front of the FastAPI app.

A body declared larger than the limit (``Content-Length``) is refused with 413 before a byte
of it is read; a body without a length (chunked) is counted while it streams and refused as
soon as it passes the limit. The limit is read at each request from ``get_limits()`` (the
app passes this process's ``service.state.current().limits``, which the ingress sets from its
settings, ``KRONOS_MAX_BODY_BYTES``) or is the fixed ``limits`` given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson
from starlette.exceptions import HTTPException

from kronos_core.base.errors import ErrorCode

DEFAULT_MAX_BODY_BYTES = 128 * 1024 * 1024  # fits 1,000 inline series of 512 candles as JSON rows


@dataclass
class Limits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def too_large_message(size: int | None, limit: int) -> str:
    """``size``: the declared length; None: a body without one that streamed past the limit."""
    what = f"is {size} bytes, above" if size is not None else "passed"
    return (f"request body {what} the limit of {limit} bytes (KRONOS_MAX_BODY_BYTES); "
            "send fewer series per request")


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` while a body streams past the limit; FastAPI re-raises
    HTTPExceptions from the body read, and the app's handler answers 413."""

    def __init__(self, limit: int):
        super().__init__(413, too_large_message(None, limit))


class BodyLimitMiddleware:
    def __init__(
        self, app, limits: Limits | None = None, get_limits: Callable[[], Limits] | None = None
    ):
        self.app = app
        fixed = limits or Limits()
        self.get_limits = get_limits or (lambda: fixed)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.get_limits().max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer_413(send, too_large_message(declared, limit))
            return
        seen = 0

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted_receive, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer_413(send, message: str) -> None:
    body = orjson.dumps({"detail": message, "code": ErrorCode.TOO_LARGE})
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]})
    await send({"type": "http.response.body", "body": body})
