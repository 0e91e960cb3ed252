"""Body limit and request deadline against the live service."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

pytestmark = pytest.mark.integration


def _raw_post_headers(url: str, content_length: int, first_bytes: bytes = b"") -> bytes:
    """Send only the head of a request (and a few body bytes); return what the server answers."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(
            b"POST /v1/forecast HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {content_length}\r\n\r\n".encode() + first_bytes
        )
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_body_above_the_limit_is_413_from_content_length_alone(live_service):
    limit = live_service.settings.max_body_bytes
    assert limit == 128 * 1024 * 1024  # the default
    # answered without waiting for the 200 MB that never come (a server waiting for them would
    # leave the socket's recv to time out: socket.timeout, no answer)
    answer = _raw_post_headers(live_service.url, 200_000_000, b'{"symbols": [')
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"too_large" in answer and b"KRONOS_MAX_BODY_BYTES" in answer
    schema = live_service.client.get("/openapi.json").json()
    assert "413" in schema["paths"]["/v1/forecast"]["post"]["responses"]
    assert live_service.client.get("/healthz").status_code == 200


def _hold_shards(live_service, seconds: float) -> None:
    """Every predictor replica holds each shard it gets ``seconds`` before it runs it (0: not at
    all; clearing releases those waiting), through the test-only fault hook
    (``service.replica.deployment.inject_fault``, run in each replica's process by Ray)."""
    import ray

    from service.replica.deployment import inject_fault

    for namespace, name in live_service.replica_actors():
        actor = ray.get_actor(name, namespace=namespace)
        done = ray.get(actor.__ray_call__.remote(inject_fault, shard_delay_s=seconds), timeout=60)
        assert done["shard_delay_s"] == seconds


def test_deadline_gives_504_and_cancels_pending_shards(live_service):
    """A request whose plan fits its deadline but whose shards do not come back in time is
    answered 504 at its deadline, its pending shards cancelled. The replicas are made to hold
    every shard (the fault hook), so that the work is late whatever the machine's speed: a request
    planned well past its deadline no longer gets this far, it is refused before any work (422
    ``deadline_unreachable``, tests/integration/test_deadline_http.py)."""
    live_service.wait_ready(2, timeout=120)
    live_service.wait_idle()
    symbols = live_service.store.symbols()[:1000]
    # a few ms of work as planned, a deadline of 1 s
    req = {"symbols": symbols[:3], "lookback": 32, "horizon": 2, "sample_count": 1}
    _hold_shards(live_service, 3600)
    try:
        r = live_service.client.post("/v1/forecast", json=req,
                                     headers={"X-Kronos-Timeout-S": "1"})
        assert r.status_code == 504, r.text[:300]  # only the deadline answers 504
        assert r.json()["code"] == "deadline_exceeded"
        deadline = time.monotonic() + 5
        while live_service.metric("kronos_queue_depth", {"stage": "shards"}) > 0:
            assert time.monotonic() < deadline, "shards still pending 5 s after the deadline"
            time.sleep(0.1)
    finally:
        _hold_shards(live_service, 0)
    assert live_service.metric("kronos_errors_total", {"code": "deadline_exceeded"}) >= 1
    schema = live_service.client.get("/openapi.json").json()
    assert "504" in schema["paths"]["/v1/forecast"]["post"]["responses"]
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": symbols[:3], "lookback": 32, "horizon": 2}
    )
    assert r.status_code == 200 and len(r.json()["forecasts"]) == 3
    with pytest.raises(httpx.HTTPStatusError):  # a deadline must be positive
        live_service.client.post(
            "/v1/forecast", json=req, headers={"X-Kronos-Timeout-S": "0"}
        ).raise_for_status()
