"""Checkpoint loading and saving in the published layout, and every loading error."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from kronos_core.model import CheckpointError, Kronos, KronosConfig, KronosTokenizer


def _copy(src, dst):
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def test_fixture_loads_and_round_trips(fixture_dir, tmp_path):
    model = Kronos.from_pretrained(fixture_dir / "model")
    tok = KronosTokenizer.from_pretrained(fixture_dir / "tokenizer")
    assert model.config.d_model == 32 and tok.config.n_enc_layers == 3
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "t")
    again = Kronos.from_pretrained(tmp_path / "m")
    for (k, a), (k2, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert json.loads((tmp_path / "m" / "config.json").read_text()) == model.config.to_dict()
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "config.json", "model.safetensors",
    ]


def test_missing_key_is_named(fixture_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(fixture_dir / "model", tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    del state["transformer.1.ffn.w2.weight"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"missing keys \['transformer\.1\.ffn\.w2\.weight'\]"
    ):
        Kronos.from_pretrained(folder)


def test_unknown_key_and_bad_shape_are_named(fixture_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(fixture_dir / "model", tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    state["extra.weight"] = torch.zeros(2)
    state["norm.weight"] = torch.zeros(31)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        Kronos.from_pretrained(folder)
    assert "unknown keys ['extra.weight']" in str(err.value)
    assert "norm.weight: checkpoint (31,) vs model (32,)" in str(err.value)


def test_config_keys_checked(fixture_dir, tmp_path):
    folder = _copy(fixture_dir / "model", tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["n_layer"] = cfg.pop("n_layers")
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        CheckpointError, match=r"missing keys \['n_layers'\]; unknown keys \['n_layer'\]"
    ):
        Kronos.from_pretrained(folder)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_weights_file(fixture_dir, tmp_path, damage):
    folder = _copy(fixture_dir / "tokenizer", tmp_path / "t")
    f = folder / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"\x00\xff" * 100, "empty": b""}[damage]
    )
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        KronosTokenizer.from_pretrained(folder)


def test_corrupt_config_and_missing_files(fixture_dir, tmp_path):
    folder = _copy(fixture_dir / "model", tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        Kronos.from_pretrained(folder)
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        Kronos.from_pretrained(folder)
    folder2 = _copy(fixture_dir / "model", tmp_path / "m2")
    (folder2 / "model.safetensors").rename(folder2 / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickled .* not loaded"):
        Kronos.from_pretrained(folder2)
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        Kronos.from_pretrained(tmp_path / "nowhere" / "deeper")


def test_mismatched_tokenizer_checkpoint(fixture_dir, tmp_path):
    """A tokenizer with other bit widths cannot be paired with the model."""
    from kronos_core import KronosPredictor
    from kronos_core.model import TokenizerConfig

    tok = KronosTokenizer(
        TokenizerConfig(
            **{
                **KronosTokenizer.from_pretrained(fixture_dir / "tokenizer").config.to_dict(),
                "s1_bits": 8,
            }
        )
    )
    tok.save_pretrained(tmp_path / "t8")
    loaded = KronosTokenizer.from_pretrained(tmp_path / "t8")
    with pytest.raises(
        ValueError, match=r"tokenizer bit widths \(s1_bits=8, s2_bits=10\) do not match the model's"
    ):
        KronosPredictor(Kronos.from_pretrained(fixture_dir / "model"), loaded, device="cpu")


def test_offline_hub_id_fails_clearly(monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="could not fetch NeoQuasar/Kronos-small .*Offline"):
        Kronos.from_pretrained("NeoQuasar/Kronos-small")


def test_hub_id_without_huggingface_hub(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError("No module named 'huggingface_hub'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=r"needs huggingface_hub"):
        Kronos.from_pretrained("NeoQuasar/Kronos-small")


def test_hub_download_path_uses_cached_snapshot(fixture_dir, tmp_path, monkeypatch):
    """A Hub id resolves through huggingface_hub's download function; exercised with a fake hub
    function returning our own checkpoint files (no model hub is reachable here)."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    calls = []

    def fake_download(repo_id, filename, revision=None):
        calls.append((repo_id, filename, revision))
        return str(fixture_dir / "model" / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.chdir(tmp_path)
    model = Kronos.from_pretrained("NeoQuasar/Kronos-tiny", revision="main")
    assert isinstance(model, Kronos) and model.config == KronosConfig.from_dict(
        model.config.to_dict()
    )
    assert calls == [
        ("NeoQuasar/Kronos-tiny", "config.json", "main"),
        ("NeoQuasar/Kronos-tiny", "model.safetensors", "main"),
    ]


@pytest.mark.parametrize("kind, key", [
    ("model", "transformer.1.self_attn.rotary.inv_freq"),
    ("tokenizer", "decoder.1.self_attn.rotary.inv_freq"),
])
def test_layers_with_different_rotary_frequencies_are_refused(fixture_dir, tmp_path, kind, key):
    """Each stack computes its rotary factors once for all its layers, so a checkpoint whose
    layers disagree is refused by name rather than forecast with the wrong rotation."""
    from safetensors.torch import load_file, save_file

    folder = _copy(fixture_dir / kind, tmp_path / kind)
    state = load_file(folder / "model.safetensors")
    assert key in state
    state[key] = state[key] * 1.5
    save_file(state, str(folder / "model.safetensors"))
    cls = Kronos if kind == "model" else KronosTokenizer
    with pytest.raises(CheckpointError, match="different rotary frequencies"):
        cls.from_pretrained(folder)
