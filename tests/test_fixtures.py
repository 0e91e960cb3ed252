"""The suite's fixtures match their documented provenance, and no data file is committed that
may not be: data from public source repositories stays in the shared folder."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
import subprocess

import pytest
from fixture_paths import (
    FIXTURE_DIR,
    FIXTURES,
    GOOG_PARITY_DIR,
    REPO,
    SHARED_A_SHARE_CASES,
    shared_dir,
    shared_path,
)

from kronos_core.data.sample_store import REAL_DIR

CHECKPOINT = ["model/config.json", "model/model.safetensors", "tokenizer/config.json",
              "tokenizer/model.safetensors"]
HASHED = {"kronos-tiny": CHECKPOINT, "kronos-tiny-goog": ["cases.json", *CHECKPOINT]}

# Data files (by extension) that may be tracked by git, with why. Market data may be bundled only
# when it comes from a package of the Python package index (provenance and licence in
# kronos_core/data/real/README.md and tests/fixtures/README.md); everything else stays in
# ../shared/data/. Adding a data file to the repository means adding it here.
DATA_EXTENSIONS = (".csv", ".tsv", ".parquet", ".feather", ".arrow", ".h5")
ALLOWED_DATA_FILES = {
    "kronos_core/data/real/goog_daily.csv": "GOOG daily, from the PyPI package backtesting",
    "kronos_core/data/real/eurusd_hourly.csv": "EUR/USD hourly, from the PyPI package backtesting",
    "kronos_core/data/real/sp500_daily.csv": "S&P 500 daily, from the PyPI package arch",
    # measurements this project made (memory samples of its soak runs), no market data
    "loadtests/results/*/samples.csv": "process memory samples of a soak run (loadtests/soak.py)",
}
BUNDLED_MARKET_DATA = [p for p in ALLOWED_DATA_FILES if p.startswith("kronos_core/data/real/")]


def _readme_hashes(folder: str) -> dict[str, str]:
    readme = (FIXTURES / "README.md").read_text()
    pattern = rf"^([0-9a-f]{{64}})  {re.escape(folder)}/(\S+)$"
    return {path: digest for digest, path in re.findall(pattern, readme, re.M)}


@pytest.mark.parametrize("folder", sorted(HASHED))
def test_fixture_files_match_the_hashes_in_the_readme(folder):
    listed = _readme_hashes(folder)
    assert sorted(listed) == sorted(HASHED[folder])
    for rel in HASHED[folder]:
        digest = hashlib.sha256((FIXTURES / folder / rel).read_bytes()).hexdigest()
        assert digest == listed[rel], f"{folder}/{rel}"


def test_goog_parity_cases_name_a_bundled_data_file():
    cases = json.loads((GOOG_PARITY_DIR / "cases.json").read_text())
    assert (REAL_DIR / cases["data_csv"]).is_file()
    assert f"kronos_core/data/real/{cases['data_csv']}" in BUNDLED_MARKET_DATA


def test_shared_a_share_cases_go_with_the_bundled_tiny_checkpoint():
    """The A-share parity cases are read from the shared folder; the checkpoint they were made
    with is the bundled ``kronos-tiny`` (the same bytes)."""
    cases_file = shared_path(SHARED_A_SHARE_CASES)
    assert json.loads(cases_file.read_text())["data_csv"] == "kline_5min_a_share.csv"
    for rel in CHECKPOINT:
        shared = (cases_file.parent / rel).read_bytes()
        assert shared == (FIXTURE_DIR / rel).read_bytes(), rel


def test_no_fixture_reads_shared_data_into_the_repository():
    """No fixture or bundled file of the repository is a copy of a shared file that must stay
    there (by SHA-256: every file of ../shared/data/ but the bundleable, the A-share cases)."""
    data = shared_dir() / "data"
    if not data.is_dir():
        pytest.skip(f"needs the shared folder's data/ to compare against, not found at {data}")
    bundleable = {p.rsplit("/", 1)[1] for p in BUNDLED_MARKET_DATA}
    kept = [p for p in data.iterdir() if p.is_file() and p.name not in bundleable | {"README.md"}]
    kept += [p for p in [shared_dir() / SHARED_A_SHARE_CASES] if p.is_file()]
    kept_out = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in kept}
    ours = [p for p in [*FIXTURES.rglob("*"), *REAL_DIR.rglob("*")] if p.is_file()]
    copies = [str(p) for p in ours if hashlib.sha256(p.read_bytes()).hexdigest() in kept_out]
    assert copies == []


def _tracked_files() -> list[str]:
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip(f"needs a git checkout with git installed to list tracked files ({REPO})")
    out = subprocess.run([git, "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def _allowed(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in ALLOWED_DATA_FILES)


def test_no_data_file_is_tracked_outside_the_allowed_list():
    data_files = [p for p in _tracked_files() if p.lower().endswith(DATA_EXTENSIONS)]
    assert [p for p in data_files if not _allowed(p)] == [], (
        "data files tracked by git outside ALLOWED_DATA_FILES: data from public source "
        "repositories stays in ../shared/data/ (tests read it through fixture_paths.shared_path)")
    assert set(BUNDLED_MARKET_DATA) <= set(data_files)


def test_the_allowed_list_check_catches_a_forbidden_file():
    assert not _allowed("kronos_core/data/real/kline_5min_a_share.csv")
    assert not _allowed("tests/fixtures/us-intraday/msft_1min.csv")
    assert not _allowed("data/corpus/XNYS/aapl_1d.parquet")
    assert _allowed("loadtests/results/soak-plain/samples.csv")


@pytest.mark.parametrize("readme", ["kronos_core/data/real/README.md", "tests/fixtures/README.md"])
def test_every_bundled_data_file_has_its_package_and_licence(readme):
    """Provenance in one place: each bundled file's row names the package and its licence."""
    text = (REPO / readme).read_text()
    licences = {"backtesting": "AGPL-3.0", "arch": "NCSA"}
    for path in BUNDLED_MARKET_DATA:
        name = path.rsplit("/", 1)[1]
        rows = [line for line in text.splitlines()
                if line.startswith(f"| `{name}` |") and "package" in line]
        assert len(rows) == 1, (readme, name)
        package = re.search(r"package[^`]*`(\w+)`", rows[0])
        assert package and package.group(1) in licences, (readme, rows[0])
        assert licences[package.group(1)] in rows[0], (readme, name)
