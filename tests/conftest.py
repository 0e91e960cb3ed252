"""Fixtures shared by the whole suite: the reference fixture checkpoint and real candle data.

Everything comes from inside the repository (``tests/fixtures/`` and the bundled
``kronos_core/data/real/``); see ``tests/fixtures/README.md`` for where each file came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fixture_paths import FIXTURE_DIR

from kronos_core.data.sample_store import REAL_DIR

DATA_DIR = REAL_DIR


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    if not FIXTURE_DIR.is_dir():
        pytest.fail(f"reference fixture not found at {FIXTURE_DIR} (it is part of the repository: restore it with git)")
    return FIXTURE_DIR


@pytest.fixture(scope="session")
def fixture_cases(fixture_dir) -> dict:
    return json.loads((fixture_dir / "cases.json").read_text())


@pytest.fixture(scope="session")
def tiny(fixture_dir):
    """(Kronos, KronosTokenizer) of the reference fixture checkpoint, on CPU."""
    from kronos_core import Kronos, KronosTokenizer

    return Kronos.from_pretrained(fixture_dir / "model"), KronosTokenizer.from_pretrained(fixture_dir / "tokenizer")


@pytest.fixture(scope="session")
def a_share() -> pd.DataFrame:
    """The real 5-minute A-share candles (2,500 rows) with parsed timestamps."""
    return pd.read_csv(DATA_DIR / "kline_5min_a_share.csv", parse_dates=["timestamps"])
