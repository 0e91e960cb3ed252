"""Admission of forecast requests at the gateway, before a byte of the body is read.

Under overload the costly part of a refusal is what precedes it: reading and parsing a body
of hundreds of symbols, only to answer 503 (issue 45: at 40 careless users a refusal took
0.2 s of a loaded machine, and the work answered per second halved). ``AdmissionMiddleware``
decides from the headers alone:

- at most ``limit`` forecast requests run at once (``KRONOS_MAX_INFLIGHT_REQUESTS``);
- up to ``queue`` more wait for a slot, first come first served, each at most
  ``KRONOS_QUEUE_WAIT_S`` and never past its own deadline (``X-Kronos-Timeout-S`` or
  ``KRONOS_REQUEST_TIMEOUT_S``): a wait costs nothing but a held connection, and the time
  waited is taken off the request's deadline (``scope["state"]["queued_s"]``);
- any other is answered 503 ``overloaded`` with ``Retry-After`` at once, its body never read.

A request that waited its bound without a slot is refused the same way. The queue turns a
burst into a short wait instead of a refusal, and its bound keeps the answered requests'
latency near what the replicas need. The state is per gateway process (``service.state``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from kronos_core.base.errors import ErrorCode

FORECAST_PATHS = ("/v1/forecast", "/forecast")
TIMEOUT_HEADER = b"x-kronos-timeout-s"


@dataclass
class Admission:
    """Slots of one gateway and the requests waiting for one."""

    limit: int = 32  # requests running at once
    queue: int = 32  # requests waiting at most
    max_wait_s: float = 2.0  # a wait's bound (the request's deadline bounds it too)
    retry_after_s: int = 1
    running: int = 0
    waiting: deque[asyncio.Future] = field(default_factory=deque)
    on_refuse: Callable[[], None] | None = None  # counts a refusal (metrics)

    async def acquire(self, deadline_s: float) -> bool:
        """True once a slot is this request's (release it after); False: refused, at once when
        the queue is full, else after waiting ``min(max_wait_s, deadline_s)``."""
        if self.running < self.limit and not self.waiting:
            self.running += 1
            return True
        wait = min(self.max_wait_s, deadline_s)
        if len(self.waiting) >= self.queue or wait <= 0:
            return False
        slot = asyncio.get_running_loop().create_future()
        self.waiting.append(slot)
        try:
            await asyncio.wait_for(asyncio.shield(slot), timeout=wait)
            return True
        except TimeoutError:
            if slot.done() and not slot.cancelled():
                return True  # handed over as the wait ended: it is ours
            slot.cancel()
            return False
        except BaseException:  # the client went away while waiting
            if slot.done() and not slot.cancelled():
                self.release()  # handed over: pass it on
            else:
                slot.cancel()
            raise
        finally:
            try:
                self.waiting.remove(slot)
            except ValueError:
                pass

    def release(self) -> None:
        """A request left: its slot goes to the longest waiting request, else is freed."""
        while self.waiting:
            slot = self.waiting.popleft()
            if not slot.done():
                slot.set_result(True)
                return
        self.running -= 1


def _deadline(scope: dict[str, Any], default_s: float) -> float:
    """The request's deadline in seconds from its ``X-Kronos-Timeout-S`` header, else the
    default (an unreadable header: the default; the route answers it 422 later)."""
    for name, value in scope.get("headers", ()):
        if name == TIMEOUT_HEADER:
            try:
                return min(default_s, float(value))
            except ValueError:
                break
    return default_s


class AdmissionMiddleware:
    """Admits POST forecast requests through ``Admission`` before their body is read; other
    routes pass. ``get_admission()`` returns this process's admission (``service.state``) and
    ``get_timeout()`` the default deadline (``KRONOS_REQUEST_TIMEOUT_S``); ``None``: admit all."""

    def __init__(
        self, app, get_admission: Callable[[], Admission | None],
        get_timeout: Callable[[], float] = lambda: 300.0,
    ):
        self.app = app
        self.get_admission = get_admission
        self.get_timeout = get_timeout

    async def __call__(self, scope, receive, send):
        gate = self.get_admission()
        if (
            gate is None or scope["type"] != "http" or scope.get("method") != "POST"
            or scope.get("path") not in FORECAST_PATHS
        ):
            await self.app(scope, receive, send)
            return
        t0 = time.monotonic()
        if not await gate.acquire(_deadline(scope, self.get_timeout())):
            if gate.on_refuse is not None:
                gate.on_refuse()
            scope.setdefault("state", {})["error_code"] = ErrorCode.OVERLOADED.value
            await _overloaded(send, gate)
            return
        scope.setdefault("state", {})["queued_s"] = time.monotonic() - t0
        try:
            await self.app(scope, receive, send)
        finally:
            gate.release()


async def _overloaded(send, gate: Admission) -> None:
    body = orjson.dumps({
        "detail": f"{gate.running} forecast requests running and {len(gate.waiting)} waiting "
                  f"(limits {gate.limit} and {gate.queue}); retry after {gate.retry_after_s} s",
        "code": ErrorCode.OVERLOADED.value,
    })
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(gate.retry_after_s).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})
