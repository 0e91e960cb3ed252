"""``kronos serve`` refuses to start with a ledger folder it cannot write (issue 28), before
Ray starts, naming the folder and the fix; a service that is "ready" and records nothing is
what it replaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_an_unwritable_ledger_folder_stops_the_start(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the ledger's parent folder should be")
    ledger = blocker / "ledger"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), KRONOS_LEDGER_DIR=str(ledger))
    run = subprocess.run(
        [sys.executable, "-m", "kronos_core.cli", "serve", "--port", "0", "--device", "cpu"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"the forecast ledger folder {ledger} is not writable" in run.stderr
    assert "KRONOS_LEDGER_DIR=off" in run.stderr
    assert "listening" not in run.stdout  # never started
