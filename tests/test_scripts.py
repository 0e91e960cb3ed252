"""The README's two commands pick their Python environment as documented (scripts/venv.sh):
the activated virtualenv, else the repository's .venv, never the system interpreter."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _fake_python(folder: Path) -> Path:
    """A stand-in ``bin/python`` that records its arguments instead of installing."""
    py = folder / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\necho "$0 $*" >> {folder}/calls\n')
    py.chmod(0o755)
    return py


def _run(cwd: Path, env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | env_extra
    script = (f'source {REPO}/scripts/venv.sh && kronos_venv "dev,hub" && echo "PY=$PY" && echo '
              '"PATH=$PATH"')
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_activated_virtualenv_is_used(tmp_path):
    venv = tmp_path / "active"
    py = _fake_python(venv)
    proc = _run(tmp_path, {"VIRTUAL_ENV": str(venv)})
    assert proc.returncode == 0, proc.stderr
    assert f"PY={py}" in proc.stdout and f"PATH={venv}/bin:" in proc.stdout  # kronos on PATH
    assert (venv / "calls").read_text().split() == [
        str(py), "-m", "pip", "install", "-q", "torch==2.13.0", "-e", ".[dev,hub]",
    ]
    assert not (tmp_path / ".venv").exists()


def test_repository_venv_is_reused(tmp_path):
    py = _fake_python(tmp_path / ".venv")
    proc = _run(tmp_path, {})
    assert proc.returncode == 0, proc.stderr
    assert f"PY={py}" in proc.stdout and "creating" not in proc.stderr
    assert f"PATH={tmp_path}/.venv/bin:" in proc.stdout
    assert "torch==2.13.0" in (tmp_path / ".venv" / "calls").read_text()


def test_scripts_call_the_helper_and_gitignore_the_venv():
    for name, extras, runs in (
        ("test.sh", "dev,hub", '"$PY" -m pytest "$@"'), ("serve.sh", "serve", 'kronos" serve "$@"'),
    ):
        text = (REPO / "scripts" / name).read_text()
        assert (
            "source scripts/venv.sh" in text and f'kronos_venv "{extras}"' in text and runs in text
        )
        assert subprocess.run(["bash", "-n", str(REPO / "scripts" / name)]).returncode == 0
    assert "/.venv/" in (REPO / ".gitignore").read_text().split()
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_small_request_cost_prints_its_figures():
    """``scripts/small_request_cost.py`` (the engine's share of a small request, docs/service.md
    "Measured") runs on the bundled model and data and prints every figure it names."""
    import json
    import sys

    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "small_request_cost.py"), "--rows", "2",
         "--lookback", "32", "--horizon", "4", "--repeats", "2", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(proc.stdout)
    assert (fig["rows"], fig["lookback"], fig["horizon"], fig["threads"]) == (2, 32, 4, 1)
    for key in ("first_step_ms", "decode_step_ms", "last_step_ms", "forecast_ms", "cpu_ms"):
        assert fig[key] > 0, key
    assert fig["forecast_ms"] >= fig["first_step_ms"] + fig["last_step_ms"]


def test_step_loop_bench_prints_its_figures():
    """``scripts/step_loop_bench.py`` (one step loop under a big request with small ones beside
    it, docs/service.md "Scheduling") runs on the bundled model and data, small sizes."""
    import json
    import sys

    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "step_loop_bench.py"), "--shards", "2",
         "--shard-series", "6", "--lookback", "32", "--horizon", "4", "--rounds", "1",
         "--small-every", "0", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(proc.stdout)
    assert len(fig["big_alone_s"]) == 2 and len(fig["big_with_small_s"]) == 1
    assert all(t > 0 for t in fig["big_alone_s"] + fig["big_with_small_s"])
    assert fig["small_requests"] >= 1 and fig["small_alone_s"] > 0 and fig["small_beside_big_s"] > 0
    assert fig["share_within_request"] is False and fig["max_step_rows"] == 20
