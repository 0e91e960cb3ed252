"""Faults on the real Ray Serve app (two CPU replicas, see conftest.py), each ending with the
service healthy: a slow replica whose shards are answered by the other one, and a replica
whose process crashes and that Serve replaces while requests keep being answered.

Faults are injected into one replica's process through Ray's ``__ray_call__`` on its actor
with ``service.replica.deployment.inject_fault`` (a test-only hook, not reachable over HTTP)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from service.replica.deployment import inject_fault

pytestmark = pytest.mark.integration



# Ray Serve's RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S default (10 s), and a margin
QUEUE_LENGTH_CACHE_S = 10.5

def _actor(live_service, replica_id: str):
    import ray

    namespace, name = next(
        a for a in live_service.replica_actors() if a[1].endswith("#" + replica_id)
    )
    return ray.get_actor(name, namespace=namespace)


def _inject(live_service, replica_id: str, **faults) -> dict:
    import ray

    return ray.get(
        _actor(live_service, replica_id).__ray_call__.remote(inject_fault, **faults), timeout=60
    )


def test_slow_replica_its_shards_are_answered_by_the_other(live_service):
    """One replica holds every shard it gets (until the fault is cleared): each of them passes
    its shard deadline, a copy is answered by the other replica, and the request completes."""
    live_service.settle()
    slow, fast = sorted(live_service.replica_ongoing())
    symbols = live_service.store.symbols()[:200]
    deadline_s = 60  # X-Kronos-Timeout-S: with shard_retries=5 a shard waits at least 60 / 6 = 10 s
    timeouts0 = live_service.metric("kronos_shard_timeouts_total")
    retries0 = live_service.metric("kronos_shard_retries_total")
    unavailable0 = live_service.metric("kronos_errors_total", {"code": "replica_unavailable"})
    slow_batches0 = live_service.metric("kronos_batch_shards_total", {"replica": slow})
    fast_batches0 = live_service.metric("kronos_batch_shards_total", {"replica": fast})
    # Serve's router keeps each replica's queue length for RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S
    # (10 s): a replica the test before left full would be skipped, and every shard sent to the
    # slow one (nothing answered, nothing hedged, a 504). Let those entries go stale first.
    time.sleep(QUEUE_LENGTH_CACHE_S)
    assert _inject(live_service, slow, shard_delay_s=3600)["shard_delay_s"] == 3600
    try:
        # summed over the requests sent
        sent = {"shard_timeouts": 0.0, "shard_retries": 0.0, "shards": 0.0}
        for _attempt in range(3):
            r = live_service.client.post(
                "/v1/forecast", json={"symbols": symbols, "lookback": 32, "horizon": 2, "seed": 3,
                      # one path: the hedging is the subject; the model's 32 paths made the fast
                      # replica's share alone outlast the deadline on a loaded machine
                      "sample_count": 1},
                headers={"X-Kronos-Timeout-S": str(deadline_s)},
            )
            assert r.status_code == 200, r.text[:500]
            body = r.json()
            assert body["errors"] == [] and [f["symbol"] for f in body["forecasts"]] == symbols
            timing = body["timing"]
            for k in sent:
                sent[k] += timing[k]
            if timing["shard_timeouts"] >= 1:
                break
            # Serve's router sent every shard to the fast replica (its picture of the slow one's
            # queue can lag a few seconds): no shard met the slow replica, so send the request again
        # some shards went to the slow replica and waited
        assert timing["shard_timeouts"] >= 1, timing
        assert timing["shard_retries"] >= timing["shard_timeouts"]
        assert (
            live_service.metric("kronos_shard_timeouts_total") == timeouts0 + sent["shard_timeouts"]
        )
        assert live_service.metric("kronos_shard_retries_total") == retries0 + sent["shard_retries"]
        # every shard was answered by the fast replica; the slow one ran no batch at all
        assert live_service.metric("kronos_batch_shards_total", {"replica": slow}) == slow_batches0
        assert (
            live_service.metric("kronos_batch_shards_total", {"replica": fast})
            >= fast_batches0 + sent["shards"]
        )
        # the slow replica's calls were cancelled, not left waiting
        live_service.wait_idle(timeout=120)
    finally:
        _inject(live_service, slow, shard_delay_s=0)
    live_service.settle()  # both replicas answer again (settle asks each of them)
    assert (
        live_service.metric("kronos_errors_total", {"code": "replica_unavailable"}) == unavailable0
    )


def test_replica_process_crash_is_replaced_while_requests_are_answered(live_service):
    """A replica's process exits (``os._exit``, like a crash or the kernel's OOM killer). Serve
    2.60 creates replica actors without Ray restarts (``max_restarts=0``): its controller sees
    the actor die and starts a replacement replica (a new id). Requests sent all along are
    answered in full; /readyz reports two replicas again; the metrics add up."""
    import ray

    live_service.settle()
    victim = sorted(live_service.replica_ongoing())[0]
    victim_actor = _actor(live_service, victim)
    symbols = live_service.store.symbols()[40:56]
    req = {"symbols": symbols, "lookback": 32, "horizon": 2, "seed": 4}
    series0 = live_service.metric("kronos_series_forecast_total")
    unavailable0 = live_service.metric("kronos_errors_total", {"code": "replica_unavailable"})
    answers: list[tuple[float, int, dict]] = []  # (sent at, status, body)
    stop = threading.Event()

    def stream():
        with httpx.Client(base_url=live_service.url, timeout=300) as c:
            while not stop.is_set():
                t = time.monotonic()
                r = c.post("/v1/forecast", json=req)
                answers.append(
                    (t, r.status_code, r.json() if r.status_code == 200 else {"text": r.text[:300]})
                )

    worker = threading.Thread(target=stream, daemon=True)
    worker.start()
    try:
        _wait(lambda: len(answers) >= 1, 120, "the first streamed request")
        pid = _inject(live_service, victim, exit_after_s=0.2)["pid"]
        t_crash = time.monotonic()

        def dead() -> bool:
            try:
                ray.get(victim_actor.__ray_ready__.remote(), timeout=10)
                return False
            except ray.exceptions.RayActorError:
                return True

        _wait(dead, 60, f"replica {victim} (pid {pid}) to die")
        seen_ready: list[int] = []

        def replaced() -> bool:
            try:
                ids = set(live_service.replica_ongoing())
            except ray.exceptions.RayActorError:  # the dead actor may still be listed for a moment
                return False
            r = live_service.client.get("/readyz", timeout=30)
            seen_ready.append(r.json().get("replicas_ready", -1))
            return (
                victim not in ids and len(ids) == 2 and r.status_code == 200 and seen_ready[-1] == 2
            )

        _wait(replaced, 300, "Serve to replace the crashed replica")
        t_back = time.monotonic()
        n_back = len(answers)
        _wait(lambda: len(answers) >= n_back + 2, 120, "two requests after the replacement")
    finally:
        stop.set()
        worker.join(timeout=300)
    assert not worker.is_alive()
    assert min(seen_ready) < 2, f"/readyz never saw the crashed replica missing: {seen_ready}"
    during = [a for a in answers if t_crash <= a[0] < t_back]
    assert during, "no request was sent while the replica was down"
    bad = [
        (s, b)
        for _, s, b in answers
        if s != 200 or b["errors"] or [f["symbol"] for f in b["forecasts"]] != symbols
    ]
    assert not bad, bad[:2]
    live_service.wait_idle(timeout=120)
    assert live_service.metric("kronos_series_forecast_total") == series0 + len(symbols) * len(
        answers
    )
    assert (
        live_service.metric("kronos_errors_total", {"code": "replica_unavailable"}) == unavailable0
    )
    assert live_service.metric("kronos_replicas_ready") == 2
    live_service.settle()  # the new replica answers a request of its own too


def _wait(cond, timeout: float, what: str) -> None:
    """Polls ``cond()`` until true; a generous deadline, this is not a timing test."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)
