"""Graceful shutdown at the gateway: once draining, new requests get 503 ``shutting_down``
(with ``Retry-After``) and ``/readyz`` says not ready, while requests already in flight run
to the end, up to the cut. ``kronos serve`` starts the drain on SIGTERM / SIGINT, waits for
the in-flight count to reach zero, then stops Serve and Ray, all within
``KRONOS_SHUTDOWN_GRACE_S``.

The shutdown budget: ``shutdown_grace_s`` is the time from the signal to the end of every
request (answered, or cut); the process exits by ``grace + EXIT_MARGIN_S`` at the latest. A
request still running ``stop_reserve(grace)`` seconds before the grace's end is cut: its pending
shards are cancelled and it is answered 503 ``shutting_down`` naming its unanswered symbols,
with the forecasts already made kept (``Lifecycle.wait_cut``, ``Dispatcher.run_all``). The
reserve is for that answer to leave and for Serve and Ray to stop. The pod's
``terminationGracePeriodSeconds`` is the grace plus ``POD_MARGIN_S`` (``pod_termination_s``).

With several gateway replicas, a drain call reaches one of them (a Serve handle picks one).
That gateway leaves a marker file in the folder the gateways on the node share (their metrics
folder), and every gateway checks the marker on each request, so all of them refuse new work;
the requests in flight are summed over the gateways through the ``livesum`` gauge
``kronos_http_requests_in_flight`` that ``gauge`` mirrors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kronos_core.base.errors import ErrorCode

# routes that keep answering while draining: probes and the metrics scrape
ALWAYS_OPEN = ("/healthz", "/readyz", "/metrics")


DRAIN_MARKER = "draining"  # file name in the gateways' shared folder; its mtime: the drain's start

STOP_RESERVE_S = 8.0  # at most this much of the grace is kept to answer cut requests and stop
# kronos serve exits by grace + this at the latest, whatever Ray's teardown still does (a
# watchdog, service.cli.exit_watchdog): Ray's own shutdown took 10 s and more past the grace on a
# loaded machine (issue 45: grace 15 s, exit at 25.0 s)
EXIT_MARGIN_S = 10.0
POD_MARGIN_S = 15  # terminationGracePeriodSeconds = grace + this (> EXIT_MARGIN_S: the kubelet
# never has to SIGKILL a service that keeps its budget)
CUT_POLL_S = 0.25  # how often a request in flight checks whether it is cut


def stop_reserve(grace_s: float) -> float:
    """Seconds of the grace kept after the cut: ``STOP_RESERVE_S``, or a third of a short grace."""
    return min(STOP_RESERVE_S, grace_s / 3)


def pod_termination_s(grace_s: float) -> int:
    """The pod's ``terminationGracePeriodSeconds`` for a service with this grace."""
    import math

    return int(math.ceil(grace_s)) + POD_MARGIN_S


@dataclass
class Lifecycle:
    draining: bool = False  # this process has seen the drain (its own call, or the marker)
    active: int = 0  # HTTP requests inside the app (not counting the always-open routes)
    retry_after_s: int = 1
    shared_dir: Path | None = None  # folder shared by the node's gateways: the drain marker
    gauge: Any = None  # a prometheus Gauge kept equal to ``active`` (summed over gateways)
    grace_s: float = 60.0  # shutdown_grace_s: from the drain's start to the process's exit
    drained_at: float | None = None  # wall time the drain started (this process's or the marker's)

    def is_draining(self) -> bool:
        """Draining here, or another gateway on the node started the drain."""
        if not self.draining and self.shared_dir is not None:
            try:
                self.drained_at = (self.shared_dir / DRAIN_MARKER).stat().st_mtime
                self.draining = True
            except FileNotFoundError:
                pass
        return self.draining

    def start_drain(self) -> None:
        if self.draining:  # a second call does not move the cut
            return
        self.draining, self.drained_at = True, time.time()
        if self.shared_dir is not None:
            marker = self.shared_dir / DRAIN_MARKER
            try:  # the first gateway to drain sets the time every gateway cuts by
                with open(marker, "x"):
                    pass
            except FileExistsError:
                pass
            self.drained_at = marker.stat().st_mtime

    def cut_at(self) -> float | None:
        """Wall time at which requests still in flight are cut; None while not draining."""
        if not self.is_draining() or self.drained_at is None:
            return None
        return self.drained_at + self.grace_s - stop_reserve(self.grace_s)

    async def wait_cut(self) -> None:
        """Returns once requests in flight must be cut (the drain's grace is nearly over)."""
        while True:
            at = self.cut_at()
            if at is not None and time.time() >= at:
                return
            await asyncio.sleep(
                CUT_POLL_S if at is None else min(CUT_POLL_S, max(0.0, at - time.time()))
            )

    def add_active(self, n: int) -> None:
        self.active += n
        if self.gauge is not None:
            self.gauge.inc(n)


class DrainMiddleware:
    """Counts requests in flight and, once draining, refuses new ones with 503. The state is
    read at each request from ``get_state()`` (the app passes this process's
    ``service.state.current().lifecycle``) or is the fixed ``state`` given."""

    def __init__(
        self, app, state: Lifecycle | None = None, get_state: Callable[[], Lifecycle] | None = None
    ):
        self.app = app
        fixed = state or Lifecycle()
        self.get_state = get_state or (lambda: fixed)

    async def __call__(self, scope, receive, send):
        st = self.get_state()
        if scope["type"] != "http" or scope.get("path") in ALWAYS_OPEN:
            await self.app(scope, receive, send)
            return
        if st.is_draining():
            body = orjson.dumps(
                {
                    "detail": "the service is shutting down; retry on another instance",
                    "code": ErrorCode.SHUTTING_DOWN.value,
                }
            )
            await send(
                {
                    "type": "http.response.start", "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(st.retry_after_s).encode()), (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        st.add_active(1)
        try:
            await self.app(scope, receive, send)  # returns once the response is sent
        finally:
            st.add_active(-1)
