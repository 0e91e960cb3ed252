"""Graceful shutdown at the gateway: once draining, new requests get 503 ``shutting_down``
(with ``Retry-After``) and ``/readyz`` says not ready, while requests already in flight run
to the end. ``kronos serve`` starts the drain on SIGTERM / SIGINT, waits for the in-flight
count to reach zero (up to ``KRONOS_SHUTDOWN_GRACE_S``), then stops Serve and Ray.

With several gateway replicas, a drain call reaches one of them (a Serve handle picks one).
That gateway leaves a marker file in the folder the gateways on the node share (their metrics
folder), and every gateway checks the marker on each request, so all of them refuse new work;
the requests in flight are summed over the gateways through the ``livesum`` gauge
``kronos_http_requests_in_flight`` that ``gauge`` mirrors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kronos_core.errors import ErrorCode

# routes that keep answering while draining: probes and the metrics scrape
ALWAYS_OPEN = ("/healthz", "/readyz", "/metrics")


DRAIN_MARKER = "draining"  # file name in the gateways' shared folder


@dataclass
class Lifecycle:
    draining: bool = False  # this process has seen the drain (its own call, or the marker)
    active: int = 0  # HTTP requests inside the app (not counting the always-open routes)
    retry_after_s: int = 1
    shared_dir: Path | None = None  # folder shared by the node's gateways: the drain marker
    gauge: Any = None  # a prometheus Gauge kept equal to ``active`` (summed over gateways)

    def is_draining(self) -> bool:
        """Draining here, or another gateway on the node started the drain."""
        if not self.draining and self.shared_dir is not None and (self.shared_dir / DRAIN_MARKER).exists():
            self.draining = True
        return self.draining

    def start_drain(self) -> None:
        self.draining = True
        if self.shared_dir is not None:
            (self.shared_dir / DRAIN_MARKER).touch()

    def add_active(self, n: int) -> None:
        self.active += n
        if self.gauge is not None:
            self.gauge.inc(n)


class DrainMiddleware:
    """Counts requests in flight and, once draining, refuses new ones with 503. The state is
    read at each request from ``get_state()`` (the app passes this process's
    ``service.state.current().lifecycle``) or is the fixed ``state`` given."""

    def __init__(self, app, state: Lifecycle | None = None, get_state: Callable[[], Lifecycle] | None = None):
        self.app = app
        fixed = state or Lifecycle()
        self.get_state = get_state or (lambda: fixed)

    async def __call__(self, scope, receive, send):
        st = self.get_state()
        if scope["type"] != "http" or scope.get("path") in ALWAYS_OPEN:
            await self.app(scope, receive, send)
            return
        if st.is_draining():
            body = orjson.dumps({"detail": "the service is shutting down; retry on another instance",
                                 "code": ErrorCode.SHUTTING_DOWN.value})
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(st.retry_after_s).encode()), (b"connection", b"close"),
            ]})
            await send({"type": "http.response.body", "body": body})
            return
        st.add_active(1)
        try:
            await self.app(scope, receive, send)  # returns once the response is sent
        finally:
            st.add_active(-1)
