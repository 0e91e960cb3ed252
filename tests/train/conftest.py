"""Tiny training configs on the bundled real candles (fast on a CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import tiny_overrides


@pytest.fixture
def tiny_config(tmp_path):
    """factory(kind="predictor", **dotted overrides) -> TrainConfig writing under tmp_path."""
    from kronos_core.train.config import load_config

    def make(kind: str = "predictor", out: Path | None = None, **extra):
        return load_config(None, tiny_overrides(out or tmp_path / "run", kind, **extra))

    return make
