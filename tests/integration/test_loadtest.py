"""locust drives real load against the live service (in its own process: locust's gevent and Ray
do not share one), and the headless runner's summary counts what happened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_locust_headless_run_against_the_service(live_service, tmp_path):
    before = live_service.client.get("/metrics").text
    proc = subprocess.run(
        [sys.executable, "-m", "kronos_core.cli", "loadtest", "--host", live_service.url, "--users", "3",
         "--spawn-rate", "3", "--run-time", "8s", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "summary.md").read_text().startswith("# Load test")
    assert summary["requests"] > 0 and summary["failures"] == 0, summary
    # the service saw the load: its request counter moved
    after = live_service.client.get("/metrics").text

    def forecasts(metrics: str) -> float:
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("kronos_request_duration_seconds_count") and "forecast" in line
        )

    assert forecasts(after) > forecasts(before)
