"""Graceful shutdown at the gateway: once draining, new requests get 503 ``shutting_down``
(with ``Retry-After``) and ``/readyz`` says not ready, while requests already in flight run
to the end. ``kronos serve`` starts the drain on SIGTERM / SIGINT, waits for the in-flight
count to reach zero (up to ``KRONOS_SHUTDOWN_GRACE_S``), then stops Serve and Ray.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from kronos_core.errors import ErrorCode

# routes that keep answering while draining: probes and the metrics scrape
ALWAYS_OPEN = ("/healthz", "/readyz", "/metrics")


@dataclass
class Lifecycle:
    draining: bool = False
    active: int = 0  # HTTP requests inside the app (not counting the always-open routes)
    retry_after_s: int = 1


STATE = Lifecycle()  # this gateway process's state; the ingress sets retry_after_s at start-up


class DrainMiddleware:
    """Counts requests in flight and, once ``STATE.draining``, refuses new ones with 503."""

    def __init__(self, app, state: Lifecycle | None = None):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        st = self.state or STATE
        if scope["type"] != "http" or scope.get("path") in ALWAYS_OPEN:
            await self.app(scope, receive, send)
            return
        if st.draining:
            body = orjson.dumps({"detail": "the service is shutting down; retry on another instance",
                                 "code": ErrorCode.SHUTTING_DOWN.value})
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(st.retry_after_s).encode()), (b"connection", b"close"),
            ]})
            await send({"type": "http.response.body", "body": body})
            return
        st.active += 1
        try:
            await self.app(scope, receive, send)  # returns once the response is sent
        finally:
            st.active -= 1
