"""scripts/make-corpus-extract.py writes only training rows; scripts/gpu-train.sh trains from
such an extract and writes the checkpoint and its figures, with pydantic, yaml, tqdm, Ray and
FastAPI unimportable (the CPU dry run of what a lent GPU machine runs; no GPU here, so the CUDA
path itself is not exercised by the suite)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from train_helpers import REPO, tiny_overrides, write_config_yaml

from tests.train.corpus_helpers import (
    allowed_by_the_rules,
    read_table,
    row_of,
    write_synthetic_corpus,
)

SCRIPT = REPO / "scripts" / "gpu-train.sh"
EXTRACTOR = REPO / "scripts" / "make-corpus-extract.py"
TINY_TOKENIZER = REPO / "tests" / "fixtures" / "kronos-tiny" / "tokenizer"
BLOCKED = ("pydantic", "yaml", "tqdm", "ray", "fastapi", "psutil", "service")
FILES = {"summary.json", "metrics.jsonl", "checkpoint/kronos.json", "checkpoint/model/config.json",
         "checkpoint/model/model.safetensors", "checkpoint/tokenizer/config.json",
         "checkpoint/tokenizer/model.safetensors"}


@pytest.fixture(scope="module")
def extract(tmp_path_factory) -> tuple[Path, Path]:
    """(synthetic corpus, its extract with a tiny train.json and the fixture's tokenizer)."""
    root = tmp_path_factory.mktemp("gpu")
    corpus = write_synthetic_corpus(root / "corpus")
    overrides = tiny_overrides(root / "unused", **{"data.lookback": 16, "data.horizon": 4,
                                                   "data.stride": 4, "max_steps": 4,
                                                   "eval_every": 2})
    config = write_config_yaml(root / "tiny.yaml", overrides, skip=("out", "kind", "data.paths"))
    out = root / "extract"
    proc = subprocess.run([sys.executable, str(EXTRACTOR), "--corpus", str(corpus), "--out",
                           str(out), "--config", str(config), "--tokenizer", str(TINY_TOKENIZER)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "5 instruments" in proc.stdout
    return corpus, out


def test_the_extract_holds_only_training_rows_and_the_same_table_rows(extract):
    corpus, out = extract
    source = read_table(corpus)
    table = read_table(out)
    assert set(table["symbol"]) == {"AAA", "AAA@1h", "BBB", "BBB@1h", "CCC"}
    pd.testing.assert_frame_equal(  # the instrument rows unchanged: the rules read the same
        table.reset_index(drop=True),
        source[source["symbol"].isin(table["symbol"])].reset_index(drop=True))
    rows = pd.concat(pd.read_parquet(p) for p in out.glob("*.parquet"))
    for symbol, part in rows.groupby("symbol"):
        stamps = pd.DatetimeIndex(part["timestamps"])
        full = pd.concat(pd.read_parquet(p, filters=[("symbol", "==", symbol)])
                         for p in corpus.glob("*.parquet"))
        allowed = allowed_by_the_rules(source, str(symbol), pd.DatetimeIndex(full["timestamps"]))
        assert len(part) == allowed.sum()  # all the allowed rows, and only those:
        for close, stamp in zip(part["close"], stamps):
            name, row, at = row_of(close)
            assert name == symbol and at == stamp and allowed[row]
    info = json.loads((out / "extract.json").read_text())
    assert info["rows"] == len(rows) and (out / "train.json").is_file()
    assert (out / "tokenizer" / "model.safetensors").is_file()


def test_a_filter_that_matches_nothing_is_a_clear_error(extract, tmp_path):
    corpus, _ = extract
    proc = subprocess.run([sys.executable, str(EXTRACTOR), "--corpus", str(corpus), "--out",
                           str(tmp_path / "x"), "--markets", "JP"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "unknown market ['JP']" in proc.stderr
    assert "Traceback" not in proc.stderr


def _blocking_site(tmp_path: Path) -> Path:
    """A folder whose sitecustomize makes BLOCKED unimportable (None in sys.modules)."""
    site = tmp_path / "blocked-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in BLOCKED))
    return site


def _run(out: Path, extract: Path, python: str, pythonpath: str | None, *flags: str):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRONOS_CORPUS_EXTRACT")}
    env["PYTHON"] = python
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(["bash", str(SCRIPT), str(out), str(extract), "--device", "cpu", *flags],
                          env=env, capture_output=True, text=True, timeout=600)


def _check_output(out: Path) -> dict:
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files == FILES and len(files) <= 8  # what the device tool brings back
    assert all(len(Path(f).parts) <= 3 for f in files)  # at most two folders down
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cpu" and summary["steps"] == summary["settings"]["max_steps"]
    assert summary["steps_per_s"] > 0 and summary["samples_per_s"] > 0 and summary["wall_s"] > 0
    assert summary["steady_steps_per_s"] > 0
    assert summary["train_windows"] > 0 and summary["val_windows"] > 0
    assert summary["first_loss"] > 0 and summary["best_val_loss"] > 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r][-1] == summary["steps"]
    assert min(r["val_loss"] for r in records if "val_loss" in r) == summary["best_val_loss"]
    manifest = json.loads((out / "checkpoint" / "kronos.json").read_text())
    assert manifest["step"] == summary["best_step"]
    return summary


def _forecasts(out: Path) -> None:
    """The checkpoint loads in the project's predictor and forecasts."""
    import numpy as np

    from kronos_core import KronosPredictor
    from kronos_core.base.options import ForecastOptions
    from kronos_core.model import Kronos, KronosTokenizer

    folder = out / "checkpoint"
    predictor = KronosPredictor(Kronos.from_pretrained(folder / "model"),
                                KronosTokenizer.from_pretrained(folder / "tokenizer"),
                                device="cpu", max_context=32)
    stamps = pd.date_range("2024-01-01", periods=23, freq="D")
    values = np.cumsum(np.ones((20, 6), np.float32), axis=0) + 10
    res = predictor.forecast([values], [stamps[:20]], [stamps[20:]], ForecastOptions(3, seed=0))
    assert res.paths.shape == (1, 1, 3, 6) and np.isfinite(res.paths).all()


def test_dry_run_from_the_extract_config_with_the_service_packages_blocked(extract, tmp_path):
    _, ext = extract
    site = _blocking_site(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import pydantic"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(site)})
    assert probe.returncode != 0  # the block works
    out = tmp_path / "out"
    proc = _run(out, ext, sys.executable, f"{site}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = _check_output(out)
    assert summary["settings"]["config_file"] == str(ext / "train.json")
    assert summary["settings"]["model"]["d_model"] == 16 and summary["steps"] == 4
    assert summary["tokenizer_from"] == str(ext / "tokenizer")
    assert "gpu-train: 4 steps (max_steps) on cpu" in proc.stdout
    _forecasts(out)


def test_dry_run_with_only_the_gpu_machine_packages(extract, tmp_path):
    """-S and a site-packages holding only torch, numpy, pandas, pyarrow, safetensors (and what
    they import), as scripts/gpu-check.sh's test builds it."""
    import torch

    spec = importlib.util.spec_from_file_location("gpu_check_test",
                                                  REPO / "tests" / "test_gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    site = Path(torch.__file__).resolve().parents[1]
    farm = tmp_path / "site"
    farm.mkdir()
    for name in module.GPU_MACHINE_PACKAGES:
        if (site / name).exists():
            (farm / name).symlink_to(site / name)
    if not all((farm / n).exists() for n in ("torch", "numpy", "pandas", "pyarrow", "safetensors")):
        pytest.skip("the packages are not laid out in one site-packages here")
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    _, ext = extract
    out = tmp_path / "out"
    proc = _run(out, ext, str(bare), str(farm), "--tiny", "--config", "/nonexistent.json")
    assert proc.returncode != 0 and "config /nonexistent.json not found" in proc.stderr
    proc = _run(out, ext, str(bare), str(farm), "--tiny", "--max-steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = _check_output(out)
    assert summary["steps"] == 3 and summary["settings"]["model"]["d_model"] == 16
    assert summary["tokenizer_from"] == "new (untrained)"  # --tiny: its own tiny tokenizer
    for name in ("pydantic", "yaml", "tqdm"):
        probe = subprocess.run([str(bare), "-c", f"import {name}"], env={"PYTHONPATH": str(farm)},
                               capture_output=True)
        assert probe.returncode != 0, name  # the farm really lacks it


def test_the_script_defaults_are_the_training_config_defaults():
    spec = importlib.util.spec_from_file_location("gpu_train", REPO / "scripts" / "gpu_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from kronos_core.train.config import load_config

    config = load_config(None).model_dump(mode="json")
    for key, value in module.DEFAULTS.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                assert config[key][sub] == v, f"{key}.{sub}"
        else:
            assert config[key] == value, key


def test_a_missing_extract_says_how_to_make_one(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "o"), str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "make-corpus-extract.py" in proc.stderr
