"""What an SRE found in staging (issue 45), over real HTTP against ``kronos serve``:

- a key added to or removed from ``KRONOS_API_KEYS_FILE`` takes effect without a restart;
- a refused key is logged by its name (or hash prefix) with the route, never the key;
- a caller's ``X-Request-Id`` longer than 128 characters (or with unsafe characters) is neither
  echoed nor logged: Serve's proxy and the gateway use a new id;
- a metrics port equal to the API port, or held by another program, stops the start; the
  banner names the port that serves the metrics.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_shutdown import ROOT, _free_port, _wait_ready

from service.auth import hash_key

pytestmark = pytest.mark.integration

TINY = ROOT / "tests" / "fixtures" / "kronos-tiny"
OLD, NEW = "old-ops-key", "new-ops-key"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "KRONOS_API_KEY")}
    env.update(PYTHONPATH=str(ROOT), KRONOS_LEDGER_DIR="off",
               KRONOS_METRICS_DIR=str(tmp_path / "metrics"), **extra)
    return env


@pytest.mark.parametrize("holder", ["api port", "another program"])
def test_a_metrics_port_that_cannot_be_bound_stops_the_start(tmp_path, holder):
    port = _free_port()
    metrics_port = port if holder == "api port" else _free_port()
    squatter = socket.socket()
    try:
        if holder == "another program":
            squatter.bind(("127.0.0.1", metrics_port))
            squatter.listen()
        run = subprocess.run(
            [sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--device",
             "cpu", "--model-dir", str(TINY)],
            cwd=ROOT, env=_env(tmp_path, KRONOS_METRICS_PORT=str(metrics_port)),
            capture_output=True, text=True, timeout=300,
        )
    finally:
        squatter.close()
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    if holder == "api port":
        assert f"KRONOS_METRICS_PORT ({port}) is the API port" in run.stderr, run.stderr
    else:
        assert f"port {metrics_port} on 127.0.0.1 is in use" in run.stderr, run.stderr
        assert "(KRONOS_METRICS_PORT)" in run.stderr
    assert "listening" not in run.stdout


def _until(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.5)


def test_keys_file_reload_request_id_limit_and_a_held_metrics_port(tmp_path):
    port, metrics_port = _free_port(), _free_port()
    url = f"http://127.0.0.1:{port}"
    keys = tmp_path / "keys"
    keys.write_text(f"{hash_key(OLD)} old * -\n")
    log_dir = tmp_path / "logs"
    env = _env(tmp_path, KRONOS_API_KEYS_FILE=str(keys), KRONOS_METRICS_PORT=str(metrics_port),
               KRONOS_LOG_DIR=str(log_dir))
    out = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--replicas", "1",
         "--device", "cpu", "--replica-cpus", "1", "--model-dir", str(TINY)],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
    )
    try:
        _wait_ready(url, proc, timeout=600, replicas=1)
        out.seek(0)
        assert f"metrics http://127.0.0.1:{metrics_port}/metrics" in out.read()  # the banner
        old, new = {"X-API-Key": OLD}, {"X-API-Key": NEW}
        assert httpx.get(f"{url}/v1/models", headers=old, timeout=60).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers=new, timeout=60).status_code == 401
        # a key added, then the old one removed: no restart
        keys.write_text(f"{hash_key(OLD)} old * -\n{hash_key(NEW)} new models -\n")
        _until(lambda: httpx.get(f"{url}/v1/models", headers=new, timeout=60).status_code == 200)
        assert httpx.get(f"{url}/v1/models", headers=old, timeout=60).status_code == 200
        keys.write_text(f"{hash_key(NEW)} new models -\n")
        _until(lambda: httpx.get(f"{url}/v1/models", headers=old, timeout=60).status_code == 401)
        assert httpx.get(f"{url}/v1/models", headers=new, timeout=60).status_code == 200
        # a route the key lacks: 403, logged with the key's name and the route, never the key
        assert httpx.get(f"{url}/v1/symbols", headers=new, timeout=60).status_code == 403
        # a caller's id: kept when short and safe, replaced when too long or unsafe
        mine = httpx.get(f"{url}/v1/models", headers={**new, "X-Request-Id": "ops-42"}, timeout=60)
        assert mine.headers["x-request-id"] == "ops-42"
        long_id = "x" * 5000
        for bad in (long_id, "a b\"c"):
            r = httpx.get(f"{url}/v1/models", headers={**new, "X-Request-Id": bad}, timeout=60)
            assert r.status_code == 200
            given = r.headers.get_list("x-request-id")
            assert len(given) == 1 and re.fullmatch(r"[0-9a-f-]{36}", given[0]), given
        # the metrics on their own port (a port held by another program while the service runs:
        # tests/service/test_request_edges.py)
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=60)
        assert scraped.status_code == 200 and "kronos_" in scraped.text
        assert httpx.get(f"{url}/metrics", timeout=60).status_code == 404  # internal port only
        time.sleep(1.0)  # the access lines reach the file
        text = "".join(p.read_text() for p in log_dir.glob("kronos-gateway-*.log"))
        assert long_id not in text and "a b\"c" not in text
        assert "API keys reloaded" in text
        refused = [line for line in text.splitlines() if "refused for GET /v1/symbols" in line]
        assert refused and "key new" in refused[0] and "'symbols'" in refused[0], refused
        unknown = [line for line in text.splitlines() if "401: key sha256:" in line]
        assert unknown and OLD not in text and NEW not in text
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
