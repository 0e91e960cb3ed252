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


def _ok_forecasts(metrics: str) -> float:
    """200s of the forecast route in the service's own request histogram."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for fam in text_string_to_metric_families(metrics)
        for s in fam.samples
        if s.name == "kronos_request_duration_seconds_count"
        and s.labels.get("route") == "/v1/forecast"
        and s.labels.get("status") == "200"
    )


def test_locust_headless_run_against_the_service(live_service, tmp_path):
    live_service.settle()
    before = live_service.client.get("/metrics").text
    min_ok = 3
    # bounded by request count, not wall time: a slow machine makes the run longer, not red
    proc = subprocess.run(
        [
            sys.executable, "-m", "kronos_core.cli", "loadtest", "--host", live_service.url,
            "--users", "3", "--spawn-rate", "3", "--requests", str(min_ok), "--out", str(tmp_path),
            "--min-ok", str(min_ok),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "summary.md").read_text().startswith("# Load test")
    # answered requests are counted apart from shed ones (503/429), and enough were answered
    assert summary["ok_200"] >= min_ok and summary["failures"] == 0, summary
    assert summary["ok_200"] + summary["shed_503_429"] <= summary["requests"]
    # the service itself answered at least that many forecasts with 200
    after = live_service.client.get("/metrics").text
    assert _ok_forecasts(after) - _ok_forecasts(before) >= summary["ok_200"]
