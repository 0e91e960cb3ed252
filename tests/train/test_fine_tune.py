"""A fine-tune keeps its checkpoint's context, sizes and dropout unless told otherwise,
and ``config.yaml`` / ``kronos.json`` record what the run really used."""

from __future__ import annotations

import json

import pytest
import yaml
from train_helpers import GOOG

from kronos_core.loading import DEFAULT_MODEL_DIR
from kronos_core.train.config import load_config
from kronos_core.train.trainer import Trainer

BUNDLED_CONTEXT = json.loads((DEFAULT_MODEL_DIR / "kronos.json").read_text())["max_context"]
BUNDLED_MODEL = json.loads((DEFAULT_MODEL_DIR / "model" / "config.json").read_text())
BUNDLED_TOKENIZER = json.loads((DEFAULT_MODEL_DIR / "tokenizer" / "config.json").read_text())


def _fine_tune(tmp_path, **extra):
    overrides = {
        "kind": "predictor", "out": str(tmp_path / "ft"), "init": str(DEFAULT_MODEL_DIR),
        "data.paths": [str(GOOG)], "data.lookback": 24, "data.horizon": 8, "data.stride": 32,
        "batch_size": 4, "max_steps": 1, "eval_every": 1, "save_every": 1, "val_batches": 1,
        "tensorboard": False, "device": "cpu", "threads": 1, **extra,
    }
    Trainer(load_config(None, overrides)).fit()
    out = tmp_path / "ft"
    return (
        yaml.safe_load((out / "config.yaml").read_text()),
        json.loads((out / "best" / "kronos.json").read_text()),
        json.loads((out / "best" / "model" / "config.json").read_text()),
    )


def test_fine_tune_keeps_the_checkpoint_context_sizes_and_dropout(tmp_path):
    # the defaults differ, so this shows
    assert BUNDLED_CONTEXT != 512 and BUNDLED_MODEL["ffn_dropout_p"] > 0
    written, manifest, model_config = _fine_tune(tmp_path)
    assert manifest["max_context"] == BUNDLED_CONTEXT
    assert written["max_context"] == BUNDLED_CONTEXT
    for key, value in written["model"].items():
        assert value == BUNDLED_MODEL[key], key
    for key, value in written["tokenizer"].items():
        assert value == BUNDLED_TOKENIZER[key], key
    assert model_config == BUNDLED_MODEL


def test_what_the_user_sets_wins_and_is_recorded(tmp_path):
    written, manifest, model_config = _fine_tune(
        tmp_path, max_context=128, **{"model.ffn_dropout_p": 0.0, "model.d_model": 32}
    )
    assert manifest["max_context"] == written["max_context"] == 128
    assert written["model"]["ffn_dropout_p"] == model_config["ffn_dropout_p"] == 0.0
    assert written["model"]["resid_dropout_p"] == BUNDLED_MODEL["resid_dropout_p"]
    # a size cannot change under loaded weights
    assert written["model"]["d_model"] == BUNDLED_MODEL["d_model"]


def test_a_window_longer_than_the_checkpoint_context_is_refused(tmp_path):
    with pytest.raises(ValueError, match=f"context {BUNDLED_CONTEXT}"):
        _fine_tune(tmp_path, **{"data.lookback": BUNDLED_CONTEXT, "data.horizon": 8})
