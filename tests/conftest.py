"""Fixtures shared by the whole suite: the reference fixture checkpoint and real candle data.

Everything comes from inside the repository (``tests/fixtures/`` and the bundled
``kronos_core/data/real/``); see ``tests/fixtures/README.md`` for where each file came from.
"""

from __future__ import annotations

import json
import os
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


# ---- running under pytest-xdist (`-n 2`, set in pyproject.toml) --------------------------------
# Everything that starts Ray goes to ONE worker as one unit of work, so the session still starts a
# single Ray instance and a single service. It is put first so that its worker starts on it at
# once; the unit tests fill the other worker (and this one when it is done), on the CPU the real
# service leaves idle while it waits on HTTP, Ray Serve and replica restarts.
# (xdist's own `--dist loadgroup` cannot do this with pytest 9: it renames `item._nodeid`, which
# pytest 9 no longer reads, so every test ends up in a group of its own.)
RAY_GROUP = "ray"


def starts_ray(nodeid: str) -> bool:
    """Tests that start Ray: the integration session and the (slow) Ray Train test."""
    return nodeid.startswith("tests/integration/") or nodeid.startswith("tests/train/test_ray_train.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not starts_ray(item.nodeid))  # stable: the Ray tests first, order kept


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class RayGroupScheduling(LoadScopeScheduling):
        """One unit of work for all the Ray tests, one per test for the others."""

        def _split_scope(self, nodeid: str) -> str:
            return RAY_GROUP if starts_ray(nodeid) else nodeid

    return RayGroupScheduling(config, log)


# The worker that starts on a unit test yields the CPU to the one running the live service (Ray,
# the replicas and the gateways keep normal priority): integration tests are the ones with
# timeouts that a starved Ray misses, and the unit tests still get every idle cycle. The processes
# that worker starts inherit its niceness.
UNIT_WORKER_NICENESS = 10
_first_test_started_ray: bool | None = None


def pytest_runtest_setup(item):
    global _first_test_started_ray
    if _first_test_started_ray is None and os.environ.get("PYTEST_XDIST_WORKER"):
        _first_test_started_ray = starts_ray(item.nodeid)
        if not _first_test_started_ray:
            os.nice(UNIT_WORKER_NICENESS)
