"""The built (thermometer) tokenizer of the bundled default: resolution, layout, and the engine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from kronos_core.base.options import ForecastOptions
from kronos_core.eval.fidelity import FIDELITY_GOAL, tokenizer_fidelity
from kronos_core.model import Kronos, KronosTokenizer
from kronos_core.model.config import KronosConfig
from kronos_core.predictor import KronosPredictor
from kronos_core.train.thermometer import (
    TOTAL_BITS,
    build_thermometer_tokenizer,
    level_widths,
    thermometer_config,
)


def random_walk_windows(n: int, length: int, seed: int) -> np.ndarray:
    """(n, length, 6) raw candles: a random-walk close, open = previous close, wicks, volume."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, (n, length + 1)), axis=1))
    open_, close = close[:, :-1], close[:, 1:]
    top, bottom = np.maximum(open_, close), np.minimum(open_, close)
    high = top * (1 + rng.uniform(0, 0.005, top.shape))
    low = bottom * (1 - rng.uniform(0, 0.005, top.shape))
    volume = rng.lognormal(10, 0.5, top.shape)
    return np.stack([open_, high, low, close, volume, volume * close], axis=-1).astype(np.float32)


def normalised(windows: np.ndarray) -> np.ndarray:
    mean, std = windows.mean(1, keepdims=True), windows.std(1, keepdims=True)
    return np.clip((windows - mean) / (std + 1e-5), -5, 5).astype(np.float32)


@pytest.fixture(scope="module")
def built():
    return build_thermometer_tokenizer(normalised(random_walk_windows(200, 96, seed=0)))


def test_the_close_resolves_a_tenth_of_a_one_step_move_on_unseen_windows(built):
    tok, _ = built
    fid = tokenizer_fidelity(tok, random_walk_windows(100, 96, seed=1))
    close = fid["close"]
    # the finest cell is 10/216 wide: a uniform value in it is off by a quarter of that on average
    assert close["error_std"] < level_widths()[-1] / 4 * 1.3
    assert close["error_over_move"] < FIDELITY_GOAL
    # the shape bits carry the open, high and low better than the window mean would (error < move)
    for name in ("open", "high", "low"):
        assert fid[name]["error_over_move"] < 1.0


def test_level_one_bits_are_a_thermometer_of_the_close(built):
    tok, _ = built
    x = torch.zeros(1, 7, 6)
    x[0, :, 3] = torch.tensor([-4.0, -2.5, -0.8, 0.8, 2.5, 4.0, 4.9])  # one close per level-1 cell
    s1, _ = tok.encode(x)
    level1 = [(int(v) & 0b11111).bit_count() for v in s1[0]]
    assert level1 == [0, 1, 2, 3, 4, 5, 5]  # thresholds at -10/3, -5/3, 0, 5/3, 10/3


def test_it_saves_and_loads_as_an_ordinary_checkpoint(built, tmp_path):
    tok, _ = built
    tok.save_pretrained(tmp_path / "tokenizer")
    again = KronosTokenizer.from_pretrained(tmp_path / "tokenizer")
    x = torch.from_numpy(normalised(random_walk_windows(4, 64, seed=2)))
    assert all(torch.equal(a, b) for a, b in zip(tok.encode(x), again.encode(x)))
    assert again.config.s1_bits + again.config.s2_bits == TOTAL_BITS


def test_the_engine_forecasts_with_it(built):
    tok, _ = built
    torch.manual_seed(0)
    model = Kronos(
        KronosConfig(s1_bits=10, s2_bits=10, n_layers=1, d_model=32, n_heads=2, ff_dim=64)
    )
    predictor = KronosPredictor(model.eval(), tok, device="cpu", max_context=128)
    raw = random_walk_windows(2, 80, seed=3)
    stamps = [pd.date_range("2024-01-01", periods=80, freq="D")] * 2
    future = [pd.date_range("2024-03-21", periods=3, freq="D")] * 2
    out = predictor.forecast(
        list(raw), stamps, future, ForecastOptions(horizon=3, sample_count=4, seed=1)
    )
    mean = np.asarray(out.mean)
    assert mean.shape[:2] == (2, 3) and np.isfinite(mean).all()


def test_a_config_without_twenty_bits_is_refused():
    from kronos_core.train.thermometer import build_encoder

    cfg = thermometer_config()
    bad = KronosTokenizer(
        type(cfg)(**{**cfg.__dict__, "s1_bits": 8, "s2_bits": 8, "group_size": 4})
    )
    with pytest.raises(ValueError, match="20"):
        build_encoder(bad, {"body": [0, 0], "wick_up": [0], "wick_down": [0], "volume": [0]})
