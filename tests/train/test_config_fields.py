"""The training YAML's ``tokenizer:`` and ``model:`` sections name the same hyper-parameters as the
checkpoint configs (``kronos_core/model/config.py``), minus what training derives itself: ``d_in``
(always the 6 candle features) and the predictor's bit widths (taken from the tokenizer). The
sections are derived from the checkpoint dataclasses (``kronos_core.train.config._fields_of``):
validated YAML with CPU-sized defaults, where a checkpoint config has no defaults for its sizes.
This test checks the derivation: same names, types and defaults."""

from __future__ import annotations

import dataclasses

import pytest

from kronos_core.model.config import KronosConfig, TokenizerConfig
from kronos_core.train.config import ModelSize, TokenizerSize


@pytest.mark.parametrize("section, checkpoint, derived", [
    (TokenizerSize, TokenizerConfig, {"d_in"}),
    (ModelSize, KronosConfig, {"s1_bits", "s2_bits"}),
])
def test_training_sections_name_the_checkpoint_fields(section, checkpoint, derived):
    fields = {f.name: f for f in dataclasses.fields(checkpoint)}
    assert set(section.model_fields) == set(fields) - derived
    for name, f in fields.items():
        if name in derived:
            continue
        assert section.model_fields[name].annotation.__name__ == f.type, name  # same type
        # a default of the checkpoint's is the training one too
        if f.default is not dataclasses.MISSING:
            assert section.model_fields[name].default == f.default, name
