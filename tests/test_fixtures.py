"""The suite's fixtures live in the repository and match their documented provenance."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from kronos_core.data.sample_store import REAL_DIR as DATA_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_DIR = FIXTURES / "kronos-tiny"
FILES = ["cases.json", "model/config.json", "model/model.safetensors", "tokenizer/config.json",
         "tokenizer/model.safetensors"]


def test_fixture_files_match_the_hashes_in_the_readme():
    readme = (FIXTURES / "README.md").read_text()
    listed = dict((path, digest) for digest, path in re.findall(r"^([0-9a-f]{64})  kronos-tiny/(\S+)$", readme, re.M))
    assert sorted(listed) == sorted(FILES)
    for rel in FILES:
        assert hashlib.sha256((FIXTURE_DIR / rel).read_bytes()).hexdigest() == listed[rel], rel


def test_cases_name_a_data_file_inside_the_repo():
    cases = json.loads((FIXTURE_DIR / "cases.json").read_text())
    assert (DATA_DIR / cases["data_csv"]).is_file()

