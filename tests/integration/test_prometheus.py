"""A real Prometheus server (the Debian ``prometheus`` package) scrapes the running service;
the metrics are read back through Prometheus' HTTP query API. In CI (``CI=true``) a missing
binary fails the test; on a workstation it skips with the install command."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    msg = f"`{name}` not found: apt-get install -y prometheus (scripts/ci-services.sh does it in CI)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg)
    pytest.skip(msg)


def _query(prom: httpx.Client, expr: str) -> list[dict]:
    r = prom.get("/api/v1/query", params={"query": expr})
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def _scalar(prom: httpx.Client, expr: str) -> float | None:
    res = _query(prom, expr)
    return float(res[0]["value"][1]) if res else None


@pytest.fixture(scope="module")
def prometheus(live_service, tmp_path_factory):
    binary = _binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    target = live_service.url.removeprefix("http://")
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {DEPLOY / 'prometheus-rules.yml'}\n"
        "scrape_configs:\n  - job_name: kronos\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            try:
                if client.get("/-/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.3)
        yield client
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_prometheus_scrapes_service_metrics(live_service, prometheus):
    store_symbols = live_service.store.symbols()
    before = live_service.metric("kronos_series_forecast_total")
    for i in range(3):
        syms = store_symbols[40 + 5 * i: 45 + 5 * i] + [f"MISSING{i}"]
        r = live_service.client.post("/v1/forecast", json={"symbols": syms, "lookback": 32, "horizon": 3})
        assert r.status_code == 200 and len(r.json()["forecasts"]) == 5
    # what the service itself exposes now (no other traffic runs during this test)
    series = live_service.metric("kronos_series_forecast_total")
    unknown = live_service.metric("kronos_errors_total", {"code": "unknown_symbol"})
    ok_requests = live_service.metric(
        "kronos_request_duration_seconds_count", {"route": "/v1/forecast", "method": "POST", "status": "200"}
    )
    tokens = live_service.metric("kronos_tokens_generated_total")
    assert series == before + 15 and unknown >= 3 and ok_requests >= 3 and tokens > 0

    # wait for a scrape that has seen all of it, then compare through the query API
    deadline = time.monotonic() + 60
    while _scalar(prometheus, "sum(kronos_series_forecast_total)") != series:
        assert time.monotonic() < deadline, _query(prometheus, "kronos_series_forecast_total")
        time.sleep(0.5)
    assert _scalar(prometheus, 'up{job="kronos"}') == 1.0
    assert _scalar(prometheus, 'sum(kronos_errors_total{code="unknown_symbol"})') == unknown
    assert _scalar(
        prometheus, 'sum(kronos_request_duration_seconds_count{route="/v1/forecast",method="POST",status="200"})'
    ) == ok_requests
    # tokens are counted per replica and summed here exactly once
    assert _scalar(prometheus, "sum(kronos_tokens_generated_total)") == tokens
    per_replica = _query(prometheus, "kronos_tokens_generated_total")
    assert len(per_replica) >= 2 and all(s["metric"]["replica"] for s in per_replica)
    mem = _query(prometheus, 'kronos_device_memory_bytes{kind="peak"}')
    assert len({s["metric"]["replica"] for s in mem}) >= 2 and all(float(s["value"][1]) > 0 for s in mem)
    assert _scalar(prometheus, "sum(kronos_batch_size_count)") >= 3
    assert _scalar(prometheus, 'kronos_queue_depth{stage="requests"}') == 0
    # latency quantile through a PromQL histogram function
    p99 = _scalar(
        prometheus,
        'histogram_quantile(0.99, sum by (le) (rate(kronos_request_duration_seconds_bucket{route="/v1/forecast"}[5m])))',
    )
    assert p99 is None or p99 >= 0
    # the shipped alert rules loaded and evaluate
    rules = prometheus.get("/api/v1/rules").json()["data"]["groups"]
    assert rules and {r["name"] for g in rules for r in g["rules"]} >= {"KronosServiceDown", "KronosHighErrorRate"}
    assert all(r["health"] in ("ok", "unknown") for g in rules for r in g["rules"]), rules


def test_deploy_prometheus_config_is_valid():
    promtool = shutil.which("promtool")
    if not promtool:
        _binary("promtool")
    r = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([promtool, "check", "rules", str(DEPLOY / "prometheus-rules.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
