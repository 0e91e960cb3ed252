"""Shared fixtures of the evaluation tests: the bundled model, real series, unseen CSVs."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import REAL, inverted_eurusd, spliced_universe
from fixture_paths import TINY


@pytest.fixture(scope="session")
def predictor():
    from kronos_core.loading import PredictorConfig, load_predictor

    return load_predictor(PredictorConfig(model=TINY, device="cpu"))  # small and fast


@pytest.fixture(scope="session")
def real_dir() -> Path:
    return REAL


@pytest.fixture
def unseen_csv(tmp_path) -> Path:
    path = tmp_path / "usdeur_hourly.csv"
    inverted_eurusd().to_csv(path, index=False)
    return path


@pytest.fixture
def unseen_universe(tmp_path) -> list[Path]:
    paths = []
    for k, df in enumerate(spliced_universe()):
        p = tmp_path / f"SYM{k}.csv"
        df.to_csv(p, index=False)
        paths.append(p)
    return paths

