"""``kronos bench mixed --quick`` against the live service: the command runs end to end, prints its
table and writes figures for every measure (the goals are judged on a full run, not here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_bench_mixed_quick_against_the_live_service(live_service, tmp_path):
    live_service.settle()
    out = tmp_path / "mixed.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "kronos_core.cli", "bench", "mixed", "--quick", "--host",
            live_service.url, "--mixed-seconds", "3", "--json", str(out),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| small request alone (median) |" in proc.stdout
    fig = json.loads(out.read_text())
    assert (
        fig["small_idle_s"] > 0 and fig["big_alone_s"] > 0 and fig["engine"]["row_steps_per_s"] > 0
    )
    assert fig["mixed"]["requests"] > 0 and fig["mixed"]["failures"] == 0
    assert fig["first_after_ready_s"] is None  # a running service: no first request to time
    assert set(fig["ratios"]) == set(fig["goals"])
    # the same-work baseline: a single-batch rate for every mixed shape, the row-steps answered of
    # each
    assert len(fig["engine"]["shape_row_steps_per_s"]) == len(fig["mixed"]["shape_row_steps"]) == 6
    assert all(r > 0 for r in fig["engine"]["shape_row_steps_per_s"])
    assert sum(fig["mixed"]["shape_row_steps"]) == fig["mixed"]["row_steps"]
    assert fig["ratios"]["mixed_over_engine"] > 0
