"""Admission before the body is read (issue 45): a bounded number of forecast requests run, a
bounded queue waits for slots no longer than its bound and the request's deadline, and the rest
are refused 503 overloaded at once, their body never read."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from service import admission as admission_mod
from service.admission import Admission, AdmissionMiddleware


def test_slots_queue_and_bounded_waits(monkeypatch):
    waits: list[float] = []  # the timeout of each wait for a slot
    real_wait_for = asyncio.wait_for

    async def wait_for(awaitable, timeout):
        waits.append(timeout)
        return await real_wait_for(awaitable, timeout)

    monkeypatch.setattr(admission_mod.asyncio, "wait_for", wait_for)

    async def scenario():
        gate = Admission(limit=2, queue=1, max_wait_s=5.0)
        assert await gate.acquire(60) and await gate.acquire(60)  # two run
        third = asyncio.create_task(gate.acquire(60))  # waits
        await asyncio.sleep(0.01)
        assert not third.done() and len(gate.waiting) == 1
        refused = gate.acquire(60)  # the queue is full: refused at once, never suspended
        with pytest.raises(StopIteration) as done:
            refused.send(None)
        assert done.value.value is False
        gate.release()  # a slot frees: the waiting request gets it, first come first served
        assert await third and gate.running == 2 and not gate.waiting
        # a wait is bounded by the request's deadline when it is shorter than the bound
        assert not await gate.acquire(0.1)
        assert waits[-1] == 0.1 and not gate.waiting
        # and by the bound itself
        gate.max_wait_s = 0.1
        assert not await gate.acquire(60)
        assert waits[-1] == 0.1
        # a waiter whose client left does not keep a slot
        leaver = asyncio.create_task(gate.acquire(60))
        await asyncio.sleep(0.01)
        leaver.cancel()
        await asyncio.sleep(0.01)
        gate.release()
        gate.release()
        assert gate.running == 0 and not gate.waiting

    asyncio.run(scenario())


def test_a_refused_request_is_answered_before_its_body_is_read():
    async def scenario():
        gate = Admission(limit=1, queue=0, max_wait_s=1.0, retry_after_s=3)
        refused: list[int] = []
        gate.on_refuse = lambda: refused.append(1)
        started = asyncio.Event()
        finish = asyncio.Event()

        async def app(scope, receive, send):
            await receive()
            if scope["method"] == "POST":
                started.set()
                await finish.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        mw = AdmissionMiddleware(app, lambda: gate)
        scope = {"type": "http", "method": "POST", "path": "/v1/forecast", "headers": []}

        async def body():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def never_read():
            raise AssertionError("the body of a refused request was read")

        sent: list[dict] = []

        async def collect(message):
            sent.append(message)

        first = asyncio.create_task(mw(dict(scope), body, lambda m: asyncio.sleep(0)))
        await started.wait()
        await mw(dict(scope), never_read, collect)  # the one slot is taken, no queue
        assert sent[0]["status"] == 503 and (b"retry-after", b"3") in sent[0]["headers"]
        assert orjson.loads(sent[1]["body"])["code"] == "overloaded" and refused == [1]
        # other routes are never held, even with every slot taken
        sent.clear()
        models = {**scope, "path": "/v1/models", "method": "GET"}
        await asyncio.wait_for(mw(models, body, collect), 5)
        assert sent[0]["status"] == 200
        finish.set()
        await first
        assert gate.running == 0

    asyncio.run(scenario())


def test_the_time_a_request_waited_for_a_slot_is_left_for_its_deadline(monkeypatch):
    """Issue 52 (a missed plant): the middleware leaves the seconds a request queued in its
    scope's state (``queued_s``), which the forecast route takes off its deadline
    (tests/service/test_app.py); a request that did not wait has 0 there. Read on a fake clock
    that the test moves by 7 s while the second request waits."""
    clock = [100.0]

    class FakeTime:
        @staticmethod
        def monotonic():
            return clock[0]

    monkeypatch.setattr(admission_mod, "time", FakeTime)

    async def scenario():
        gate = Admission(limit=1, queue=1, max_wait_s=60.0)
        started, finish = asyncio.Event(), asyncio.Event()

        async def app(scope, receive, send):
            if not started.is_set():
                started.set()
                await finish.wait()

        mw = AdmissionMiddleware(app, lambda: gate)
        first = {"type": "http", "method": "POST", "path": "/v1/forecast", "headers": []}
        second = dict(first)
        running = asyncio.create_task(mw(first, None, None))
        await started.wait()
        waiting = asyncio.create_task(mw(second, None, None))
        await asyncio.sleep(0)
        assert len(gate.waiting) == 1
        clock[0] += 7.0
        finish.set()
        await running
        await waiting
        assert first["state"]["queued_s"] == 0.0 and second["state"]["queued_s"] == 7.0

    asyncio.run(scenario())
