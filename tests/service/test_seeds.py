"""Seeds are keyed by the series' values (what docs/service.md says): a replica's seeded
forecast of a series does not depend on what shares its batch, and identical candles get
identical draws. Runs the bundled tiny model through the replica's StepRunner (step at a time)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import TINY
from service_fakes import make_options, run_shards

from kronos_core.loading import PredictorConfig, load_predictor
from service.common.messages import Shard
from service.replica.step_runner import StepRunner


@pytest.fixture(scope="module")
def runner():
    return StepRunner(load_predictor(PredictorConfig(model=TINY, device="cpu")), "r", "cpu")


def _series(seed: int, n: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    close = 100 + np.cumsum(rng.normal(0, 1, n))
    return np.stack([close, close + 1, close - 1, close, np.full(n, 1e3), close * 1e3], 1).astype(
        np.float32
    )


def _shard(values: list[np.ndarray], index: int = 0) -> Shard:
    options = make_options(horizon=2, sample_count=2, seed=11)
    ts = pd.date_range("2024-01-01", periods=len(values[0]), freq="h").to_numpy()
    yts = pd.date_range(ts[-1], periods=3, freq="h")[1:].to_numpy()
    return Shard(
        "r", index, values, [ts] * len(values), [yts] * len(values), options, return_paths=True
    )


def test_seeded_draws_follow_the_values_not_the_batch(runner):
    a, b = _series(1), _series(2)
    (alone,), (one,) = run_shards(runner, [_shard([b])])
    (mixed,), (three,) = run_shards(runner, [_shard([a, b, a])])
    assert (one.series, three.series) == (1, 3)  # b ran alone, then in one job of three
    # b: same draws whatever shares the batch
    np.testing.assert_array_equal(alone.paths[0], mixed.paths[1])
    # identical candles, identical draws
    np.testing.assert_array_equal(mixed.paths[0], mixed.paths[2])
    assert not np.array_equal(mixed.paths[0], mixed.paths[1])  # different candles, different draws
