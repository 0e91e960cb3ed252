"""Fixtures shared by the whole suite: the reference fixture checkpoints and real candle data.

Bundled files come from inside the repository (``tests/fixtures/`` and ``kronos_core/data/real/``;
``tests/fixtures/README.md`` says where each came from). Data that may not be committed (the
A-share file, its parity cases) is read from the shared folder beside the repository through
``fixture_paths.shared_path``: the tests that need it skip, saying why, when it is absent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from fixture_paths import (
    FIXTURE_DIR,
    GOOG_PARITY_DIR,
    SHARED_A_SHARE,
    SHARED_A_SHARE_CASES,
    shared_path,
)

from kronos_core.data.sample_store import REAL_DIR

DATA_DIR = REAL_DIR


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    if not FIXTURE_DIR.is_dir():
        pytest.fail(f"reference fixture not found at {FIXTURE_DIR} (it is part of the repository: "
                    "restore it with git)")
    return FIXTURE_DIR


def _checkpoint(folder: Path):
    """(Kronos, KronosTokenizer) of a fixture checkpoint folder, on CPU."""
    from kronos_core import Kronos, KronosTokenizer

    model = Kronos.from_pretrained(folder / "model")
    return model, KronosTokenizer.from_pretrained(folder / "tokenizer")


@pytest.fixture(scope="session")
def tiny(fixture_dir):
    """(Kronos, KronosTokenizer) of the random-weight tiny checkpoint, on CPU."""
    return _checkpoint(fixture_dir)


def with_amount(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``amount = volume x mean(open, high, low, close)`` when it has no turnover:
    the fill the reference applies to the whole file before cutting windows."""
    if "amount" in df.columns:
        return df
    return df.assign(amount=df["volume"] * df[["open", "high", "low", "close"]].mean(axis=1))


@pytest.fixture(scope="session")
def goog() -> pd.DataFrame:
    """The bundled real GOOG daily candles (2,148 rows), parsed timestamps, ``amount`` filled:
    the real series the predictor and engine tests cut their windows from."""
    return with_amount(pd.read_csv(DATA_DIR / "goog_daily.csv", parse_dates=["timestamps"]))


@dataclass(frozen=True)
class Parity:
    """A reference parity fixture: a checkpoint, the reference's greedy forecasts on windows of
    a real candle file (``cases``: see ``shared/fixtures/README.md``), and that file's candles."""

    name: str
    model: object
    tokenizer: object
    cases: dict
    candles: pd.DataFrame


def _parity(name: str) -> Parity:
    if name == "goog":  # bundled: always runs
        cases = json.loads((GOOG_PARITY_DIR / "cases.json").read_text())
        candles = with_amount(pd.read_csv(DATA_DIR / cases["data_csv"], parse_dates=["timestamps"]))
        return Parity(name, *_checkpoint(GOOG_PARITY_DIR), cases, candles)
    # A-share: the cases (their intermediates hold normalized A-share rows) and the candles stay
    # in the shared folder; the checkpoint is the bundled kronos-tiny (the same files)
    cases = json.loads(shared_path(SHARED_A_SHARE_CASES).read_text())
    candles = pd.read_csv(shared_path(SHARED_A_SHARE), parse_dates=["timestamps"])
    return Parity(name, *_checkpoint(FIXTURE_DIR), cases, candles)


@pytest.fixture(scope="session", params=["goog", "a_share"])
def parity(request) -> Parity:
    """Each reference parity fixture: GOOG daily (bundled) and the A-share cases (shared folder,
    skipped when it is absent)."""
    return _parity(request.param)


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
    return nodeid.startswith(("tests/integration/", "tests/train/test_ray_train.py"))


def pytest_collection_modifyitems(config, items):
    # stable: the Ray tests first, order kept
    items.sort(key=lambda item: not starts_ray(item.nodeid))


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
