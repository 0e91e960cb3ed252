"""Tokenizer fidelity (kronos_core/eval/fidelity.py) against round trips computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kronos_core.eval.fidelity import fidelity_windows, tokenizer_fidelity


class HalfGrid:
    """A stand-in tokenizer whose round trip rounds every value to the nearest 0.5."""

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.round(x * 2) / 2, torch.zeros(x.shape[:2])

    def decode(self, s1: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
        return s1


def test_close_error_and_move_match_a_hand_computed_round_trip():
    close = np.array([1.0, 2.0, 3.0, 4.0])
    window = np.zeros((1, 4, 6), dtype=np.float32)
    window[0, :, 3] = close
    # by hand: mean 2.5, population std sqrt(1.25); normalised -1.342, -0.447, 0.447, 1.342
    sd = math.sqrt(1.25)
    norm = (close - 2.5) / (sd + 1e-5)
    rounded = np.array([-1.5, -0.5, 0.5, 1.5])
    error = np.abs(rounded - norm).mean()  # 0.1056
    move = 1.0 / (sd + 1e-5)  # every step moves 1 price unit = 0.894 std
    got = tokenizer_fidelity(HalfGrid(), window)["close"]
    assert got["error_std"] == pytest.approx(error, rel=1e-5)
    assert got["move_std"] == pytest.approx(move, rel=1e-5)
    assert got["error_over_move"] == pytest.approx(error / move, rel=1e-5)
    assert got["windows"] == 1


def test_the_move_is_the_one_step_change_not_the_level():
    """Closes 1, 2, 4, 3: the mean absolute one-step move (price moves 1, 2, 1) differs from the
    mean absolute normalised level, so a move taken as the level is caught. Planted fault it
    catches: ``np.abs(np.diff(x, axis=1)).mean()`` -> ``np.abs(x).mean()`` (the move) in
    ``fidelity_from_arrays``."""
    close = np.array([1.0, 2.0, 4.0, 3.0])
    window = np.zeros((1, 4, 6), dtype=np.float32)
    window[0, :, 3] = close
    # by hand: mean 2.5, population std sqrt((2.25 + 0.25 + 2.25 + 0.25) / 4) = sqrt(1.25);
    # normalised -1.342, -0.447, 1.342, 0.447 (mean absolute level 0.894 std)
    sd = math.sqrt(1.25) + 1e-5
    norm = (close - 2.5) / sd
    rounded = np.array([-1.5, -0.5, 1.5, 0.5])  # HalfGrid's round trip
    error = np.abs(rounded - norm).mean()  # (0.158 + 0.053 + 0.158 + 0.053) / 4 = 0.1056
    move = (1.0 + 2.0 + 1.0) / 3 / sd  # price moves 1, 2, 1: 4/3 units = 1.193 std
    level = np.abs(norm).mean()  # 0.894 std: what a level-based "move" would give
    assert abs(move - level) > 0.25  # the case tells the two apart
    got = tokenizer_fidelity(HalfGrid(), window)["close"]
    assert got["error_std"] == pytest.approx(error, rel=1e-5)
    assert got["move_std"] == pytest.approx(move, rel=1e-5)
    assert got["error_over_move"] == pytest.approx(error / move, rel=1e-5)
    assert got["error_over_move"] == pytest.approx(0.0885, abs=1e-4)  # 0.1056 / 1.193


def test_a_constant_feature_is_left_out():
    window = np.zeros((2, 8, 6), dtype=np.float32)
    window[:, :, 3] = np.arange(8)
    got = tokenizer_fidelity(HalfGrid(), window)
    assert got["volume"] == {
        "error_std": None, "move_std": None, "error_over_move": None, "windows": 0,
    }
    assert got["close"]["windows"] == 2


def test_a_real_tokenizer_round_trip(tiny):
    tiny_tokenizer = tiny[1]
    rng = np.random.default_rng(0)
    prices = 100 + np.cumsum(rng.normal(size=(3, 32)), axis=1)
    windows = np.stack([prices, prices + 1, prices - 1, prices, rng.uniform(1, 2, (3, 32)),
                        rng.uniform(1, 2, (3, 32))], axis=-1).astype(np.float32)  # (3, 32, 6)
    got = tokenizer_fidelity(tiny_tokenizer, windows)
    x = torch.from_numpy(windows)
    norm = torch.clamp(
        (x - x.mean(1, keepdim=True)) / (x.std(1, unbiased=False, keepdim=True) + 1e-5), -5, 5
    )
    with torch.no_grad():
        decoded = tiny_tokenizer.decode(*tiny_tokenizer.encode(norm))
    expected = (decoded[..., 3] - norm[..., 3]).abs().mean().item()
    assert got["close"]["error_std"] == pytest.approx(expected, rel=1e-4)


def test_windows_are_counted_back_from_the_end():
    values = np.arange(100, dtype=np.float32)[:, None].repeat(6, axis=1)
    w = fidelity_windows(values, length=10, count=3, start=50)
    assert w.shape == (3, 10, 6)
    assert w[-1, -1, 0] == 99  # the last window ends at the last row
    assert w[0, 0, 0] == 50  # the first starts at `start`
    assert fidelity_windows(values, length=10, count=3, start=95).shape == (0, 10, 6)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\(N, L, 6\)"):
        tokenizer_fidelity(HalfGrid(), np.zeros((4, 6)))


def test_the_fidelity_script_prints_every_group_of_both_hold_outs(tmp_path, capsys, fixture_dir):
    import importlib.util
    import json
    from pathlib import Path

    from tests.train.corpus_helpers import write_synthetic_corpus

    corpus = write_synthetic_corpus(tmp_path / "corpus")
    path = Path(__file__).resolve().parents[2] / "scripts" / "tokenizer-fidelity.py"
    spec = importlib.util.spec_from_file_location("tokenizer_fidelity_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "fid.json"
    assert script.main(["--corpus", str(corpus), "--tokenizer", str(fixture_dir / "tokenizer"),
                        "--windows", "2", "--length", "16", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert set(figures) == {"train", "holdout_instrument"}
    assert "US/1d" in figures["holdout_instrument"] and "all" in figures["train"]
    assert "| instrument | US/1d |" in table and "| time | all |" in table
