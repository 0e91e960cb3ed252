"""Metrics shared by several gateway processes (prometheus_client multiprocess mode): each
process writes its own files, any process's exposition answers the sum; a dead process's counts
stay while its live gauges go. Every gateway is a real separate process here (a subprocess),
because multiprocess mode is a per-process switch this test process must not flip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from service.common.metrics import file_pids, forget_dead_processes
from service.lifecycle import DRAIN_MARKER, DrainMiddleware, Lifecycle

ROOT = Path(__file__).resolve().parents[2]

GATEWAY = """
import json, sys
from service.common.metrics import Metrics
m = Metrics(shared_dir=sys.argv[1])
n = int(sys.argv[2])
m.series_forecast.inc(n)
m.request_seconds.labels(route="/v1/forecast", method="POST", status="200").observe(0.1 * n)
m.queue_depth.labels(stage="requests").set(n)          # livesum: still 'in flight' when it exits
m.replicas_ready.set(n)                                # mostrecent
m.record_error("unknown_symbol", n)
if sys.argv[3] == "close":
    m.close()
print(json.dumps({"exposition": m.exposition().decode(), "series": m.total("kronos_series_forecast_total")}))
"""  # noqa: E501


def _gateway(shared: Path, n: int, close: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", GATEWAY, str(shared), str(n), "close" if close else "crash"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _samples(shared: Path) -> dict[tuple, float]:
    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(shared))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in reg.collect()
        for s in fam.samples
    }


def test_gateways_sum_their_counts_and_a_dead_ones_counts_stay(tmp_path):
    shared = tmp_path / "kronos-node"
    first = _gateway(shared, 3, close=False)  # exits without close(): like a killed gateway
    second = _gateway(shared, 5, close=True)
    assert first["series"] == 3
    assert second["series"] == 3 + 5  # the second gateway's /metrics answers the total
    assert "kronos_series_forecast_total 8.0" in second["exposition"]
    assert len(file_pids(shared)) == 2  # one set of files per process

    got = _samples(shared)
    assert got[("kronos_series_forecast_total", ())] == 8
    assert got[("kronos_errors_total", (("code", "unknown_symbol"),))] == 8
    ok = (("method", "POST"), ("route", "/v1/forecast"), ("status", "200"))
    assert got[("kronos_request_duration_seconds_count", ok)] == 2
    assert abs(got[("kronos_request_duration_seconds_sum", ok)] - 0.8) < 1e-9
    assert got[("kronos_replicas_ready", ())] == 5  # mostrecent: the later report
    # the closed gateway's live gauge left; the 'killed' one's still counts until it is forgotten
    assert got[("kronos_queue_depth", (("stage", "requests"),))] == 3
    dead = forget_dead_processes(shared)
    assert len(dead) == 1
    after = _samples(shared)
    # no live gateway left
    assert after.get(("kronos_queue_depth", (("stage", "requests"),)), 0) == 0
    assert after[("kronos_series_forecast_total", ())] == 8  # counts are never dropped


def test_a_drain_started_at_one_gateway_reaches_the_others(tmp_path):
    """Two gateways' lifecycle states sharing a folder: the drain marker one leaves makes the
    other refuse new work too."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    here, there = Lifecycle(shared_dir=tmp_path), Lifecycle(shared_dir=tmp_path)
    app = FastAPI()
    app.add_middleware(DrainMiddleware, state=there)

    @app.get("/work")
    async def work():
        return {"ok": True}

    client = TestClient(app)
    assert client.get("/work").status_code == 200
    here.start_drain()
    assert (tmp_path / DRAIN_MARKER).exists() and here.is_draining()
    r = client.get("/work")
    assert r.status_code == 503 and r.json()["code"] == "shutting_down"
    assert there.is_draining()


def test_in_flight_gauge_follows_the_active_count():
    from service.common.metrics import Metrics

    m = Metrics()
    state = Lifecycle(gauge=m.http_in_flight)
    state.add_active(1)
    state.add_active(1)
    assert m.total("kronos_http_requests_in_flight") == 2 and state.active == 2
    state.add_active(-2)
    assert m.total("kronos_http_requests_in_flight") == 0
