"""``kronos serve`` as a user starts and stops it (the tiny fixture model, one CPU replica):
a second service on the same port stops before Ray starts (exit 2, naming the port and the
first service's process), and a clean stop (SIGTERM) prints nothing alarming."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "kronos-tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local Ray
    env.update(PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--replicas", "1",
         "--device", "cpu", "--replica-cpus", "1", "--model-dir", str(TINY)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )


def test_second_service_on_a_busy_port_exits_2_and_a_clean_stop_prints_no_failure(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first_log = open(tmp_path / "first.log", "w+")
    first = _serve(port, first_log)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert first.poll() is None, f"kronos serve exited early with {first.returncode}"
            try:
                if httpx.get(f"{url}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "kronos serve not ready"
            time.sleep(0.5)
        second = subprocess.run(
            [
                sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--device",
                "cpu", "--model-dir", str(TINY),
            ],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"port {port} on 127.0.0.1 is in use by pid" in second.stderr, second.stderr
        assert "listening" not in second.stdout and "Started a local Ray" not in second.stderr
        assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200  # the first one serves on
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=180) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    first_log.seek(0)
    out = first_log.read()
    assert "stopped" in out
    alarming = [line for line in out.splitlines()
                if any(word in line for word in ("failed", "ray.kill", "Traceback", "ERROR"))]
    assert alarming == [], out[-3000:]
