"""scripts/gpu-check.sh keeps working: its CPU dry run (--device cpu --tiny) writes the figures,
also with nothing but torch, numpy, pandas, pyarrow and safetensors importable (the GPU machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu-check.sh"
FILES = {"summary.json", "engine.json", "syncs.json", "steps.json", "interleave.json", "mixed.json"}
# what the GPU machine has, plus what those packages import themselves
GPU_MACHINE_PACKAGES = [
    "torch", "torchgen", "functorch", "numpy", "numpy.libs", "pandas", "pyarrow", "safetensors",
    "typing_extensions.py", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock",
    "fsspec", "dateutil", "pytz", "tzdata", "six.py",
]


def _run(out: Path, python: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPU_CHECK_MIXED")}
    env["PYTHON"] = python
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(["bash", str(SCRIPT), str(out), "--device", "cpu", "--tiny"], env=env,
                          capture_output=True, text=True, timeout=900)  # a hang guard


def _check_figures(out: Path) -> dict:
    assert {p.name for p in out.iterdir()} == FILES and len(FILES) <= 8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cpu" and summary["tiny"] is True
    assert summary["tokens_per_s"] > 0 and summary["series_steps_per_s"] > 0
    assert summary["host_syncs_per_steady_step"] == 0
    assert (
        summary["cached_identical_to_recompute"] is True
        and summary["interleaved_identical"] is True
    )
    # CPU: ignored
    assert summary["decode_step_ms"] > 0 and summary["decode_step_ms_cuda_graphs"] is None
    engine = json.loads((out / "engine.json").read_text())
    assert (
        engine["fits_context"]["cached"]["tokens_per_s"] > 0
        and engine["sliding"]["rolling"]["seconds"] > 0
    )
    syncs = json.loads((out / "syncs.json").read_text())
    assert set(syncs["cases"]) == {"greedy", "seeded", "rolling_slides", "exact_slides"}
    assert all(
        case["steady_max"] == 0 and case["steady_steps"] > 0 for case in syncs["cases"].values()
    )
    steps = json.loads((out / "steps.json").read_text())
    assert "ignored" in steps["cuda_graphs"]["skipped"]
    assert "skipped" in json.loads((out / "mixed.json").read_text())  # --tiny never starts Ray
    return summary


def test_cpu_dry_run_writes_the_figures(tmp_path):
    proc = _run(tmp_path / "out", sys.executable)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = _check_figures(tmp_path / "out")
    assert summary["wall_s"] > 0  # how long it took is a figure, not a limit (issue 52)


def test_runs_with_only_the_gpu_machine_packages(tmp_path):
    """No service/, pydantic, Ray, psutil, tqdm: a site-packages holding only the GPU machine's
    packages."""
    import torch

    site = Path(torch.__file__).resolve().parents[1]
    farm = tmp_path / "site"
    farm.mkdir()
    for name in GPU_MACHINE_PACKAGES:
        if (site / name).exists():
            (farm / name).symlink_to(site / name)
    if not all((farm / n).exists() for n in ("torch", "numpy", "pandas", "pyarrow", "safetensors")):
        pytest.skip("the packages are not laid out in one site-packages here")
    bare = tmp_path / "python"
    # -S: no site-packages but the farm
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    proc = _run(tmp_path / "out", str(bare), str(farm))
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_figures(tmp_path / "out")
    probe = subprocess.run(
        [str(bare), "-c", "import pydantic"], env={"PYTHONPATH": str(farm)}, capture_output=True
    )
    assert probe.returncode != 0  # the farm really lacks them
