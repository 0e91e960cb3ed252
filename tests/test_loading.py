"""The one predictor loader: configuration, sources (default, alias, bundle folder, checkpoint
pair), model identity, and the options reaching the engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fixture_paths import FIXTURE_DIR, TINY

from kronos_core import loading
from kronos_core.loading import (
    ALIASES,
    PredictorConfig,
    add_predictor_arguments,
    load_checkpoints,
    load_predictor,
    predictor_config_from_args,
)
from kronos_core.model import CheckpointError


def _tiny_bundle(tmp_path: Path, manifest: dict | None = None) -> Path:
    """A folder laid out as `kronos train` writes it: model/, tokenizer/ and kronos.json."""
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE_DIR / "model", root / "model")
    shutil.copytree(FIXTURE_DIR / "tokenizer", root / "tokenizer")
    if manifest is not None:
        (root / "kronos.json").write_text(json.dumps(manifest))
    return root


def test_config_validates_and_normalises_spellings():
    assert PredictorConfig(dtype="bf16").dtype == "bfloat16"
    assert PredictorConfig(dtype="FP16").torch_dtype() is torch.float16
    assert PredictorConfig().torch_dtype() is None
    with pytest.raises(ValueError, match="dtype"):
        PredictorConfig(dtype="float64")
    with pytest.raises(ValueError, match="sliding"):
        PredictorConfig(sliding="fast")
    with pytest.raises(ValueError, match="device"):
        PredictorConfig(device="tpu")
    with pytest.raises(ValueError, match="max_context"):
        PredictorConfig(max_context=0)


def test_cli_flags_build_the_config():
    import argparse

    parser = argparse.ArgumentParser()
    add_predictor_arguments(parser)
    args = parser.parse_args(
        [
            "--model", "kronos-small", "--dtype", "bf16", "--compile", "--sliding", "rolling",
            "--device", "cpu", "--max-context", "256",
        ]
    )
    cfg = predictor_config_from_args(args)
    assert cfg == PredictorConfig(
        model="kronos-small", device="cpu", dtype="bfloat16", compile=True, sliding="rolling",
        max_context=256,
    )


def test_options_reach_the_engine(monkeypatch):
    """dtype, compile and sliding given to the loader are what the generator is called with."""
    from kronos_core.engine import generate as gen

    seen = []
    real = gen.Generator.start  # the predictor's forecasts start a Generation here

    def spy(self, batch, cfg):
        seen.append(cfg)
        return real(self, batch, gen.GenerationConfig(**{**cfg.__dict__, "compile": False}))

    monkeypatch.setattr(gen.Generator, "start", spy)
    p = load_predictor(PredictorConfig(model=TINY, device="cpu", dtype="bfloat16", compile=True,
                                       sliding="rolling", max_context=64))
    import numpy as np
    import pandas as pd

    from kronos_core.base.options import ForecastOptions

    ts = pd.date_range("2024-01-02", periods=40, freq="D")
    x = np.abs(np.random.default_rng(0).normal(10, 1, (40, 6))).astype(np.float32)
    p.forecast(
        [x], [ts], [pd.date_range("2024-02-11", periods=3, freq="D")], ForecastOptions(3, top_k=1)
    )
    assert seen[-1].autocast_dtype is torch.bfloat16
    assert seen[-1].compile is True and seen[-1].sliding == "rolling" and seen[-1].max_context == 64


def test_identity_of_the_tiny_fixture_and_the_trained_default():
    p = load_predictor(PredictorConfig(model=TINY, device="cpu"))
    ident = p.identity
    assert ident.random_weights and not ident.bundled and ident.name == "kronos-tiny-random"
    assert len(ident.sha256) == 64 and ident.sha256 not in (
        ident.model_sha256, ident.tokenizer_sha256,
    )
    default = load_checkpoints(PredictorConfig())
    assert default.identity.bundled and not default.identity.random_weights
    assert default.identity.name == "kronos-default" and default.max_context == 256
    assert default.identity.sha256 != ident.sha256


def test_a_missing_default_model_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "DEFAULT_MODEL_DIR", tmp_path / "gone")
    with pytest.raises(CheckpointError, match="embedded default model is missing"):
        load_predictor()


def test_sha256_changes_when_weights_change(tmp_path):
    root = _tiny_bundle(tmp_path, {"name": "mine", "max_context": 128})
    before = load_checkpoints(PredictorConfig(model=str(root)))
    assert (
        before.identity.name == "mine" and before.max_context == 128 and not before.identity.bundled
    )
    model = before.model
    with torch.no_grad():
        model.head.proj_s1.weight[0, 0] += 1.0
    model.save_pretrained(root / "model")
    after = load_checkpoints(PredictorConfig(model=str(root)))
    assert after.identity.model_sha256 != before.identity.model_sha256
    assert after.identity.sha256 != before.identity.sha256
    assert after.identity.tokenizer_sha256 == before.identity.tokenizer_sha256


def test_alias_picks_its_tokenizer_and_context(monkeypatch, tmp_path):
    """Aliases resolve to the published pair and context; the Hub is simulated by local folders
    (no network here), the real download path is tested in tests/model/test_checkpoint.py."""
    root = _tiny_bundle(tmp_path)
    asked = []

    def fake_resolve(name, revision=None):
        asked.append(name)
        return root / ("tokenizer" if "Tokenizer" in name else "model")

    monkeypatch.setattr(loading, "resolve_checkpoint", fake_resolve)
    for alias, spec in ALIASES.items():
        asked.clear()
        loaded = load_checkpoints(PredictorConfig(model=alias))
        assert asked == [spec.model, spec.tokenizer]
        assert loaded.max_context == spec.max_context and loaded.identity.name == alias
    assert ALIASES["kronos-mini"].max_context == 2048
    assert ALIASES["kronos-mini"].tokenizer.endswith("Kronos-Tokenizer-2k")


def test_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint folder at /nope"):
        load_predictor(PredictorConfig(model="/nope"))
    with pytest.raises(CheckpointError, match="without a tokenizer"):
        load_predictor(PredictorConfig(model=str(FIXTURE_DIR / "model")))
    root = _tiny_bundle(tmp_path)
    (root / "kronos.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="kronos.json is not valid JSON"):
        load_predictor(PredictorConfig(model=str(root)))


def test_serve_dtype_flag_reaches_the_replica_engine(monkeypatch):
    """`kronos serve --dtype bfloat16 --sliding rolling` → Settings → the replica's predictor."""
    import argparse

    from service import cli
    from service.replica.deployment import Predictor

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    settings = cli.settings_from_args(
        parser.parse_args(
            [
                "--dtype", "bfloat16", "--sliding", "rolling", "--device", "cpu", "--max-context",
                "64",
            ]
        )
    )
    replica = Predictor.func_or_class(settings)  # the deployment's class, built outside Serve
    core = replica.core  # its step loops in this process (a LoopWorker)
    assert core.predictor.dtype is torch.bfloat16 and core.predictor.sliding == "rolling"
    assert core.predictor.max_context == 64
    assert core.model["dtype"] == "bfloat16" and len(core.model["sha256"]) == 64


def test_serve_refuses_a_bad_model_before_starting_ray(capsys, monkeypatch):
    import argparse

    from service import cli

    started = []
    # Ray/Serve would start here
    monkeypatch.setattr(cli, "start", lambda *a, **k: started.append(a))
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args(["--model-dir", "/tmp/definitely-not-a-model"]))
    assert code == 2
    err = capsys.readouterr().err
    assert "no checkpoint folder at /tmp/definitely-not-a-model" in err
    assert started == []  # refused before anything started


def test_the_bundled_model_has_an_alias_everywhere_a_model_is_named(tmp_path, capsys):
    """``kronos-default`` names the embedded model: the loader, forecast, eval and serve's check."""
    import argparse

    from kronos_core.cli import main
    from service import cli

    by_name, default = (
        load_checkpoints(PredictorConfig(model="kronos-default")),
        load_checkpoints(PredictorConfig()),
    )
    assert by_name.identity == default.identity and by_name.max_context == default.max_context
    assert by_name.identity.bundled
    goog = Path(loading.__file__).parent / "data" / "real" / "goog_daily.csv"
    assert (
        main(
            [
                "forecast", "--csv", str(goog), "--horizon", "2", "--model", "kronos-default",
                "--device", "cpu",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "eval", "--data", str(goog), "--lookback", "32", "--horizon", "2", "--windows", "1",
                "--sample-count", "2", "--model", "kronos-default", "--device", "cpu",
                "--monitor-out", str(tmp_path / "m.json"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert (
        cli.check_model(
            cli.settings_from_args(parser.parse_args(["--model-dir", "kronos-default"]))
        )
        is None
    )
