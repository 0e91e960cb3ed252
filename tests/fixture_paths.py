"""Where the suite's fixtures live: in the repository (``tests/fixtures/``, see its README) and,
for data that may not be committed, in the team's shared folder beside the repository.

The shared folder (``<repo>/../shared``, or ``$KRONOS_SHARED_DIR``) holds data taken from public
source repositories (``data/kline_5min_a_share.csv``, ``data/msft_1min.csv``, ``data/corpus/``)
and the A-share parity cases. Tests that need one of them call ``shared_path``: it returns the
path, or skips the test saying which file is missing and where it was looked for. A fresh clone
with nothing beside it passes, with those tests counted as skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_DIR = FIXTURES / "kronos-tiny"
# The random-weight tiny checkpoint as a loader bundle (model/, tokenizer/, kronos.json):
# PredictorConfig(model=TINY) gives a predictor on it. Test-only; the package ships the trained
# default.
TINY = str(FIXTURE_DIR)
# Another random-weight tiny checkpoint with the reference's forecasts on GOOG daily rows (bundled
# data): the parity check that always runs.
GOOG_PARITY_DIR = FIXTURES / "kronos-tiny-goog"

SHARED_ENV = "KRONOS_SHARED_DIR"
# Files of the shared folder the tests read (never copied into the repository).
SHARED_A_SHARE = "data/kline_5min_a_share.csv"  # one Shanghai A-share, 5 min: XSHG, lunch break
SHARED_MSFT = "data/msft_1min.csv"  # MSFT 1 min, six NYSE sessions: US intraday
SHARED_A_SHARE_CASES = "fixtures/kronos-tiny/cases.json"  # reference forecasts on the A-share rows
SHARED_CORPUS = "data/corpus"  # the multi-market training corpus (a folder)


def shared_dir() -> Path:
    """The shared folder: ``$KRONOS_SHARED_DIR`` when set, else ``<repo>/../shared``."""
    env = os.environ.get(SHARED_ENV)
    return Path(env).expanduser() if env else REPO.parent / "shared"


def shared_path(relative: str) -> Path:
    """``relative`` inside the shared folder; skips the calling test when it is not there."""
    path = shared_dir() / relative
    if not path.exists():
        pytest.skip(
            f"needs {relative} of the shared folder, not found at {path}: data from public "
            f"source repositories is never committed (set {SHARED_ENV} to the folder that has it)"
        )
    return path
