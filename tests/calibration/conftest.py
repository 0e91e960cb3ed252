"""Fixtures of the calibration tests. The calibration was evaluation code before it became its own
package, so its tests share the evaluation tests' helpers (tests/eval/eval_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "eval"))

from fixture_paths import TINY  # noqa: E402


@pytest.fixture(scope="session")
def predictor():
    from kronos_core.loading import PredictorConfig, load_predictor

    return load_predictor(PredictorConfig(model=TINY, device="cpu"))  # small and fast
