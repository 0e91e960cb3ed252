"""Graceful shutdown of ``kronos serve`` as Kubernetes does it: SIGTERM to the process while a
1,000-symbol request runs. The request completes, new requests get 503 from both gateway
replicas, ``/readyz`` goes false, and the process exits 0 without stack dumps. The same service runs
with API keys on, which are checked first (401, 403, 429 from the real gateway).
The shutdown budget (a request that outlives the grace):
tests/integration/test_shutdown_budget.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from service.auth import hash_key

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIG, SMALL = "big-test-key", "small-test-key"  # API keys of this test's service

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 420, replicas: int = 2) -> None:
    """Until /readyz says ready with ``replicas`` predictor replicas running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"kronos serve exited early with {proc.returncode}"
        try:
            r = httpx.get(f"{url}/readyz", timeout=15)
            if r.status_code == 200 and r.json()["replicas_ready"] >= replicas:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("kronos serve not ready")


def _check_keys_and_rate_limit(url: str, symbols: list[str]) -> None:
    """API keys on (KRONOS_API_KEYS): 401 / 403 / 429 from the real gateway; keys in no metric."""
    req = {"symbols": symbols[:30], "lookback": 32, "horizon": 2}
    assert httpx.post(f"{url}/v1/forecast", json=req, timeout=60).status_code == 401
    assert (
        httpx.post(
            f"{url}/v1/forecast", json=req, headers={"X-API-Key": "nope"}, timeout=60
        ).status_code
        == 401
    )
    r = httpx.get(f"{url}/v1/models", headers={"X-API-Key": SMALL}, timeout=60)
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert (
        httpx.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {BIG}"}, timeout=60
        ).status_code
        == 200
    )
    # 1 series/s with a 10 s burst, split over the two gateways (0.5 series/s and 5 series each):
    # each gateway admits its first 30-series request (into 25 series of debt, ~50 s) and
    # refuses the next: of three requests, at most two pass, the first always
    codes = [httpx.post(f"{url}/v1/forecast", json=req, headers={"X-API-Key": SMALL}, timeout=120)
             for _ in range(3)]
    statuses = [c.status_code for c in codes]
    assert statuses[0] == 200 and 429 in statuses and statuses.count(200) <= 2, codes
    limited = next(c for c in codes if c.status_code == 429)
    assert limited.json()["code"] == "rate_limited" and int(limited.headers["Retry-After"]) >= 1
    metrics = httpx.get(f"{url}/metrics", timeout=60).text  # /metrics stays open
    assert 'code="rate_limited"' in metrics
    for secret in (BIG, SMALL, hash_key(BIG), hash_key(SMALL)):
        assert secret not in metrics


def test_sigterm_lets_the_request_in_flight_finish_then_exits_0(tmp_path):
    from kronos_core.data.store import KlineStore
    from service.common.settings import Settings

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local Ray
    metrics_dir = tmp_path / "metrics"
    env.update(
        PYTHONPATH=str(ROOT), KRONOS_SHUTDOWN_GRACE_S="300", KRONOS_METRICS_DIR=str(metrics_dir),
        KRONOS_API_KEYS=(f"{hash_key(BIG)} big * -; {hash_key(SMALL)} small forecast 1"),
    )
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--replicas", "2",
         "--device", "cpu", "--replica-cpus", "1", "--gateway-replicas", "2"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        _wait_ready(url, proc)
        assert [p.name for p in metrics_dir.iterdir()] and all(
            p.name.startswith("kronos-") for p in metrics_dir.iterdir()
        )
        symbols = KlineStore(Settings().resolved_store_dir()).symbols()[:1000]
        _check_keys_and_rate_limit(url, symbols)
        result: dict = {}

        def call():
            with httpx.Client(base_url=url, timeout=400, headers={"X-API-Key": BIG}) as c:
                result["r"] = c.post(
                    "/v1/forecast", json={"symbols": symbols, "lookback": 64, "horizon": 8}
                )

        t = threading.Thread(target=call)
        t.start()
        time.sleep(2.0)  # the request is in the gateway, its shards at the replicas
        assert t.is_alive(), "the request finished before the signal: make it bigger"
        proc.send_signal(signal.SIGTERM)
        # draining: not ready, new work refused with a documented 503
        deadline = time.monotonic() + 30
        while (ready := httpx.get(f"{url}/readyz", timeout=15)).status_code == 200:
            assert time.monotonic() < deadline, "/readyz still ready 30 s after SIGTERM"
            time.sleep(0.2)
        assert ready.status_code == 503 and ready.json()["ready"] is False
        assert t.is_alive(), "the request should still be running while the gateway drains"
        # the drain call reached one gateway; both refuse new work (the shared drain marker)
        refused_by: set[str] = set()
        for _ in range(40):
            late = httpx.post(
                f"{url}/v1/forecast", json={"symbols": symbols[:2], "horizon": 2}, timeout=15,
                headers={"X-API-Key": BIG},
            )
            assert late.status_code == 503 and late.json()["code"] == "shutting_down"
            assert int(late.headers["Retry-After"]) >= 1
            refused_by.add(late.headers["X-Kronos-Gateway"])
            if len(refused_by) == 2:
                break
        assert len(refused_by) == 2, f"only gateway {refused_by} answered 40 late requests"
        t.join(timeout=400)
        r = result["r"]
        assert r.status_code == 200, r.text[:300]
        assert len(r.json()["forecasts"]) == 1000 and r.json()["errors"] == []
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    out = log.read()
    assert "stopped" in out
    assert list(metrics_dir.iterdir()) == []  # its own Ray is gone: the gateways' metric files too
    for dump in ("Traceback", "*** SIG", "Stack trace", "core dumped", "Fatal Python error"):
        assert dump not in out, out[-3000:]

