"""Weights on every node (issue 19): the checkpoint's bytes, checked by SHA-256 and cached on
the replica's node; a copy that does not match, or a store that is gone, is refused with an
error naming the node and where the weights came from. The real path through Ray's object
store runs in tests/integration/test_multinode.py."""

from __future__ import annotations

import shutil

import pytest

from kronos_core.loading import (
    PredictorConfig,
    default_bundle,
    load_checkpoints,
    model_identity,
    resolve_source,
)
from service.common.settings import Settings
from service.replica import weights as W


def _shipped(folder) -> W.ShippedWeights:
    """What ``ship`` would hand the replicas for ``folder``, with its file list as ``ship``
    makes it."""
    import hashlib

    source = resolve_source(PredictorConfig(model=str(folder)))
    ident = model_identity(source)
    files = W.collect_files(source.model_dir, source.tokenizer_dir)
    hashes = tuple(sorted((rel, hashlib.sha256(data).hexdigest()) for rel, data in files.items()))
    return W.ShippedWeights(ident.name, ident.sha256, ident.model_sha256, ident.tokenizer_sha256,
                            source.max_context, source.random_weights, "kronos-weights-x", "ns",
                            f"{folder} on node driver", hashes)


@pytest.fixture
def checkpoint(tmp_path):
    folder = tmp_path / "driver" / "my-model"
    bundle = default_bundle()
    assert bundle is not None
    shutil.copytree(bundle, folder)
    return folder


def test_cached_copy_loads_as_the_same_model(checkpoint, tmp_path):
    shipped = _shipped(checkpoint)
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    assert set(files) >= {
        "model/model.safetensors", "model/config.json", "tokenizer/model.safetensors",
    }
    dest = W.write_cache(files, shipped, tmp_path / "cache")
    assert dest == tmp_path / "cache" / shipped.sha256 and W.is_cached(dest, shipped)
    shutil.rmtree(checkpoint)  # the driver's folder is gone: the copy stands alone
    loaded = load_checkpoints(PredictorConfig(model=str(dest)))
    # the manifest's
    assert loaded.identity.sha256 == shipped.sha256 and loaded.identity.name == shipped.name
    assert loaded.max_context == shipped.max_context
    assert loaded.identity.random_weights == shipped.random_weights
    assert W.write_cache(files, shipped, tmp_path / "cache") == dest  # already there: reused
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [shipped.sha256]  # no temporary left


def test_bytes_that_do_not_match_are_refused(checkpoint, tmp_path):
    shipped = _shipped(checkpoint)
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    data = files["tokenizer/model.safetensors"]
    files["tokenizer/model.safetensors"] = data[:-1] + bytes([data[-1] ^ 0xFF])  # one byte flipped
    with pytest.raises(
        W.WeightsError,
        match=r"node n1: the tokenizer weights shipped from .*my-model on node "
        r"driver have SHA-256",
    ):
        W.write_cache(files, shipped, tmp_path / "cache", "node n1")
    assert not (tmp_path / "cache" / shipped.sha256).exists()


def test_localize_uses_the_node_cache_and_names_node_and_path_when_the_store_is_gone(
    checkpoint, tmp_path, monkeypatch
):
    shipped = _shipped(checkpoint)
    monkeypatch.setenv(W.CACHE_ENV, str(tmp_path / "node-cache"))
    settings = Settings(model_dir="/only/on/the/driver", tokenizer_dir="/nor/this")
    assert W.localize(settings, None) is settings  # nothing shipped (bundled model): unchanged
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    fetched: list[W.ShippedWeights] = []

    def fetch(s: W.ShippedWeights) -> dict[str, bytes]:
        fetched.append(s)
        return files

    monkeypatch.setattr(W, "_fetch", fetch)
    local = W.localize(settings, shipped)
    assert (
        local.model_dir == str(tmp_path / "node-cache" / shipped.sha256)
        and local.tokenizer_dir is None
    )
    # cached
    assert W.localize(settings, shipped).model_dir == local.model_dir and len(fetched) == 1
    # a node with no copy, and the store gone
    monkeypatch.setenv(W.CACHE_ENV, str(tmp_path / "other-node"))
    monkeypatch.setattr(W, "_fetch", REAL_FETCH)
    monkeypatch.setattr(W, "_node_id", lambda: "n2")
    import ray

    def no_actor(*a, **k):
        raise ValueError("Failed to look up actor with name 'kronos-weights-x'")

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_actor", no_actor)
    with pytest.raises(
        W.WeightsError,
        match=r"node n2: model '.*' is not cached here and its weight store "
        r"\(kronos-weights-x, holding .*my-model on node driver\)",
    ):
        W.localize(settings, shipped)
    # the store gone, but the very same folder mounted on this node too (a shared volume): used as
    # is
    on_volume = Settings(model_dir=str(checkpoint))
    assert W.localize(on_volume, shipped) is on_volume
    other = tmp_path / "other-weights"
    shutil.copytree(checkpoint, other)
    (other / "model" / "model.safetensors").write_bytes(b"not the same weights")
    with pytest.raises(W.WeightsError, match="node n2"):
        W.localize(Settings(model_dir=str(other)), shipped)


REAL_FETCH = W._fetch


def test_nothing_is_shipped_without_ray_or_for_the_bundled_model(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert W.ship(Settings(model_dir="/anywhere")) is None
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    assert W.ship(Settings()) is None  # the bundled model is in the package on every node


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_a_damaged_cached_copy_is_fetched_again_not_trusted(
    checkpoint, tmp_path, monkeypatch, damage
):
    """A copy under the right cache folder name (``<cache>/<sha256>``) whose weights are cut
    short or have a changed byte is not used: ``localize`` checks its SHA-256, fetches the
    files again and replaces it; with the store gone too, a ``WeightsError`` names the node."""
    shipped = _shipped(checkpoint)
    cache = tmp_path / "node-cache"
    monkeypatch.setenv(W.CACHE_ENV, str(cache))
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    dest = W.write_cache(files, shipped, cache)
    weights = dest / "model" / "model.safetensors"
    good = weights.read_bytes()
    if damage == "truncated":
        # a copy cut short (a disk full, a replica killed)
        weights.write_bytes(good[: len(good) // 2])
    else:
        weights.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])  # one bit flipped
    assert dest.name == shipped.sha256 and not W.is_cached(dest, shipped)
    fetched: list[str] = []

    def fetch(s: W.ShippedWeights) -> dict[str, bytes]:
        fetched.append(s.sha256)
        return files

    monkeypatch.setattr(W, "_fetch", fetch)
    settings = Settings(model_dir="/only/on/the/driver")
    local = W.localize(settings, shipped)
    assert fetched == [shipped.sha256]  # fetched again
    assert (
        local.model_dir == str(dest) and weights.read_bytes() == good and W.is_cached(dest, shipped)
    )
    # damaged again, and this time the fetch fails: refused, never loaded
    weights.write_bytes(good[: len(good) // 3])

    def gone(s: W.ShippedWeights) -> dict[str, bytes]:
        raise W.WeightsError(
            f"node n3: model {s.name!r} is not cached here and its weight store did not answer"
        )

    monkeypatch.setattr(W, "_fetch", gone)
    with pytest.raises(W.WeightsError, match="node n3: model .* is not cached here"):
        W.localize(settings, shipped)


@pytest.mark.parametrize(
    "tamper, named",
    [
        ("description", "kronos.json"),  # name and context edited (issue 45)
        ("config", "model/config.json"),
        ("extra", "model/extra.json"),
    ],
)
def test_an_edited_cached_description_or_config_is_detected_and_fetched_again(
    checkpoint, tmp_path, monkeypatch, caplog, tamper, named
):
    """The whole cached folder is checked, not only the weights: a ``kronos.json`` edited to
    another name and a smaller context (the weights untouched), a changed config, or a file
    added beside them is not trusted. ``localize`` logs a warning naming the file, fetches the
    files again, and the reloaded copy has the shipped name and context."""
    import json
    import logging

    shipped = _shipped(checkpoint)
    cache = tmp_path / "node-cache"
    monkeypatch.setenv(W.CACHE_ENV, str(cache))
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    dest = W.write_cache(files, shipped, cache)
    assert W.cache_problem(dest, shipped) is None
    if tamper == "description":
        desc = json.loads((dest / "kronos.json").read_text())
        desc.update(name=f"{desc['name']}-TAMPERED", max_context=64)
        (dest / "kronos.json").write_text(json.dumps(desc))
        assert load_checkpoints(PredictorConfig(model=str(dest))).max_context == 64  # it would
    elif tamper == "config":
        config = dest / "model" / "config.json"
        config.write_text(config.read_text().replace("}", ', "x": 1}', 1))
    else:
        (dest / "model" / "extra.json").write_text("{}")
    problem = W.cache_problem(dest, shipped)
    assert problem is not None and problem.startswith(named) and not W.is_cached(dest, shipped)
    fetched: list[str] = []

    def fetch(s: W.ShippedWeights) -> dict[str, bytes]:
        fetched.append(s.sha256)
        return files

    monkeypatch.setattr(W, "_fetch", fetch)
    monkeypatch.setattr(W, "_node_id", lambda: "n4")
    with caplog.at_level(logging.WARNING, logger=W.__name__):
        local = W.localize(Settings(model_dir="/only/on/the/driver"), shipped)
    assert fetched == [shipped.sha256]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "node n4" in warned[0] and named in warned[0], warned
    assert W.cache_problem(dest, shipped) is None
    loaded = load_checkpoints(PredictorConfig(model=local.model_dir))
    assert loaded.identity.name == shipped.name and loaded.max_context == shipped.max_context
    assert loaded.identity.sha256 == shipped.sha256


def test_shipped_configs_that_do_not_match_their_hash_are_refused(checkpoint, tmp_path):
    shipped = _shipped(checkpoint)
    files = W.collect_files(checkpoint / "model", checkpoint / "tokenizer")
    files["model/config.json"] = files["model/config.json"] + b" "
    with pytest.raises(W.WeightsError, match=r"node n5: model/config.json shipped from .* SHA-256"):
        W.write_cache(files, shipped, tmp_path / "cache", "node n5")
    assert not (tmp_path / "cache" / shipped.sha256).exists()
