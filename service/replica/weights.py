"""Weights on every node: a predictor replica on another machine cannot read a model folder
that exists only where ``kronos serve`` (or a Serve config's build) ran.

The driver (``service.app.build_app``) reads the checkpoint's files once and hands them to a
small named actor on its own node (or the gateways' node), ``WeightStore``, which puts them
into Ray's object store and owns them there for as long as it lives. A replica
(``localize``) looks for a copy in its node's cache (``$KRONOS_WEIGHTS_CACHE``, default
``<tmp>/kronos-weights``, one folder per SHA-256). The whole folder is checked
(``cache_problem``): every shipped file's SHA-256 and the ``kronos.json`` that holds the model's
name and context. A copy that differs is fetched again, with a warning naming the file. A
fetch checks the SHA-256 of both weight files against the ``ModelIdentity`` the driver
computed and of every other file against the driver's list, writes them to the cache
(atomically: a folder renamed into place) and loads from there. The
bundled default model is in the package on every node and is not shipped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "KRONOS_WEIGHTS_CACHE"  # read by cache_root (spelt out there, for the variable scan)
ACTOR_PREFIX = "kronos-weights-"
WEIGHTS_NAME = "model.safetensors"
_SHIPPED: list[ShippedWeights] = []  # by this process: released when it stops (release_all)


class WeightsError(RuntimeError):
    """The weights cannot be made local on this node (store gone, or bytes that do not match)."""


@dataclass(frozen=True)
class ShippedWeights:
    """What a replica needs to fetch and check the driver's checkpoint (small; pickled to it)."""

    name: str  # ModelIdentity.name: the cached bundle keeps it
    sha256: str  # ModelIdentity.sha256 (both weight files): the cache folder's name
    model_sha256: str
    tokenizer_sha256: str
    max_context: int
    random_weights: bool
    actor: str  # the WeightStore's name
    namespace: str
    origin: str  # "<path> on node <id>": where the driver read it, for error messages
    # ("model/<name>" | "tokenizer/<name>", SHA-256) of every shipped file, weights and configs:
    # a cached copy must hold exactly these (empty: only the weight files are known)
    files_sha256: tuple[tuple[str, str], ...] = ()


def cache_root() -> Path:
    """This node's cache of shipped weights (``$KRONOS_WEIGHTS_CACHE``, else
    ``<tmp>/kronos-weights``)."""
    return Path(
        os.environ.get("KRONOS_WEIGHTS_CACHE") or Path(tempfile.gettempdir()) / "kronos-weights"
    )


def collect_files(model_dir: Path, tokenizer_dir: Path) -> dict[str, bytes]:
    """The regular files of both checkpoint folders, as ``{"model/<name>" | "tokenizer/<name>":
    bytes}`` (symlinks followed: a Hub snapshot links to its blobs)."""
    files: dict[str, bytes] = {}
    for part, folder in (("model", model_dir), ("tokenizer", tokenizer_dir)):
        for file in sorted(folder.iterdir()):
            if file.is_file():
                files[f"{part}/{file.name}"] = file.read_bytes()
    return files


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


DESCRIPTION_NAME = "kronos.json"


def description(shipped: ShippedWeights) -> bytes:
    """The cached bundle's ``kronos.json`` (the model's name and context), made from what the
    driver shipped: a cached copy's own must be exactly this."""
    return json.dumps(
        {
            "name": shipped.name,
            "max_context": shipped.max_context,
            "random_weights": shipped.random_weights,
        }
    ).encode()


def expected_files(shipped: ShippedWeights) -> dict[str, str]:
    """Every file a cached copy of ``shipped`` holds, by path in the folder, with its SHA-256."""
    files = dict(shipped.files_sha256)
    files[f"model/{WEIGHTS_NAME}"] = shipped.model_sha256
    files[f"tokenizer/{WEIGHTS_NAME}"] = shipped.tokenizer_sha256
    files[DESCRIPTION_NAME] = _sha256(description(shipped))
    return files


def cache_problem(folder: Path, shipped: ShippedWeights) -> str | None:
    """What is wrong with the copy of ``shipped`` in ``folder``, naming the file (None: a complete
    copy). The whole folder is checked: each weight and config file against its shipped
    SHA-256, ``kronos.json`` against the shipped description, and no file beside them (when the
    shipped file list is known)."""
    from kronos_core.loading import file_sha256

    if not folder.is_dir():
        return "no copy"
    want = expected_files(shipped)
    for rel, digest in sorted(want.items()):
        try:
            got = file_sha256(folder / rel)
        except OSError:
            return f"{rel} is missing"
        if got != digest:
            return f"{rel} has SHA-256 {got[:12]}, expected {digest[:12]}"
    if shipped.files_sha256:
        extra = sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and str(p.relative_to(folder)) not in want
        )
        if extra:
            return f"{extra[0]} is not one of the shipped files"
    return None


def is_cached(folder: Path, shipped: ShippedWeights) -> bool:
    """A complete, unchanged copy of ``shipped`` in ``folder`` (``cache_problem`` finds none)."""
    return cache_problem(folder, shipped) is None


def write_cache(
    files: dict[str, bytes], shipped: ShippedWeights, root: Path, node: str = "this node"
) -> Path:
    """Check the weight files' SHA-256, then write the files as a bundle folder ``root/<sha256>``
    (with a ``kronos.json`` that keeps the model's name and context). Returns the folder."""
    for part, want in (("model", shipped.model_sha256), ("tokenizer", shipped.tokenizer_sha256)):
        got = _sha256(files.get(f"{part}/{WEIGHTS_NAME}", b""))
        if got != want:
            raise WeightsError(
                f"{node}: the {part} weights shipped from {shipped.origin} have SHA-256 "
                f"{got[:12]}, expected {want[:12]}; not cached"
            )
    for rel, want in shipped.files_sha256:
        got = _sha256(files.get(rel, b""))
        if got != want:
            raise WeightsError(
                f"{node}: {rel} shipped from {shipped.origin} has SHA-256 {got[:12]}, expected "
                f"{want[:12]}; not cached"
            )
    dest = root / shipped.sha256
    if is_cached(dest, shipped):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{shipped.sha256[:12]}-", dir=root))
    try:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        (tmp / DESCRIPTION_NAME).write_bytes(description(shipped))
        shutil.rmtree(dest, ignore_errors=True)  # an incomplete copy left by a replica that died
        try:
            os.replace(tmp, dest)
        except OSError:  # another replica on this node renamed its copy first
            if not is_cached(dest, shipped):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _node_id() -> str:
    import ray

    if not ray.is_initialized():  # get_runtime_context() would start a Ray instance
        return "local"
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:
        return "unknown"


def _fetch(shipped: ShippedWeights) -> dict[str, bytes]:
    import ray

    try:
        store = ray.get_actor(shipped.actor, namespace=shipped.namespace)
        (ref,) = ray.get(store.files.remote(), timeout=120)
        return ray.get(ref, timeout=600)
    except Exception as exc:
        raise WeightsError(
            f"node {_node_id()}: model {shipped.name!r} is not cached here and its weight "
            f"store ({shipped.actor}, holding {shipped.origin}) did not answer: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def localize(settings, shipped: ShippedWeights | None):
    """``settings`` pointing at this node's copy of the shipped checkpoint (fetched, checked and
    cached first when absent); unchanged when nothing was shipped."""
    if shipped is None:
        return settings
    dest = cache_root() / shipped.sha256
    problem = cache_problem(dest, shipped)
    if problem is not None:
        node = f"node {_node_id()}"
        if dest.exists():  # a copy was there: damaged, edited, or cut short
            log.warning(
                "%s: the cached copy of model %s in %s is not the shipped one (%s); fetching it "
                "again", node, shipped.name, dest, problem,
            )
        try:
            files = _fetch(shipped)
        except WeightsError:
            # the store died with its node (the head): a shared
            if same_files_here(settings, shipped):
                return settings  # volume mounted here too holds the very same weights
            raise
        write_cache(files, shipped, cache_root(), node)
        log.info(
            "%s: weights %s (sha256 %s) fetched from %s into %s",
            node,
            shipped.name,
            shipped.sha256[:12],
            shipped.origin,
            dest,
        )
    return settings.model_copy(
        update={"model_dir": str(dest), "tokenizer_dir": None, "model_revision": None}
    )


def same_files_here(settings, shipped: ShippedWeights) -> bool:
    """The configured model folder exists on this node and holds the shipped weights (SHA-256)."""
    from kronos_core.loading import model_identity, resolve_source

    try:
        return (
            model_identity(resolve_source(settings.predictor_config(device="cpu"))).sha256
            == shipped.sha256
        )
    except Exception:  # not here (the usual case on another machine), or unreadable
        return False


def _store_class():
    import ray

    @ray.remote(num_cpus=0)
    class WeightStore:
        """Owns the checkpoint's bytes in the object store (put once here; replicas read the
        ref)."""

        def __init__(self, boxed):
            files = ray.get(boxed[0])  # boxed: so that the driver's ref reaches here unresolved
            self._ref = ray.put(files)  # owned by this actor: outlives the driver that shipped it
            self.nbytes = sum(len(b) for b in files.values())

        def files(self):
            return [self._ref]  # boxed: the caller gets the ref, and fetches once

        def size(self) -> int:
            return self.nbytes

    return WeightStore


def ship(settings, namespace: str | None = None) -> ShippedWeights | None:
    """Put the configured checkpoint into the object store for the replicas (None: nothing to ship,
    the bundled default model, or no Ray). Runs where the model folder is (the driver)."""
    import ray

    from kronos_core.loading import model_identity, resolve_source

    if not ray.is_initialized():
        return None
    source = resolve_source(settings.predictor_config(device="cpu"))
    if source.bundled and not settings.tokenizer_dir:
        return None  # in the package, on every node
    identity = model_identity(source)
    ctx = ray.get_runtime_context()
    namespace = namespace or ctx.namespace
    name = f"{ACTOR_PREFIX}{identity.sha256[:16]}"
    opts: dict = {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
    }
    if settings.gateway_resource:  # beside the gateways (the head), which a GPU node's loss spares
        opts["resources"] = {settings.gateway_resource: 0.001}
    else:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False)
    files = collect_files(source.model_dir, source.tokenizer_dir)
    store = _store_class().options(**opts).remote([ray.put(files)])
    nbytes = ray.get(store.size.remote(), timeout=300)
    origin = (
        f"{source.model_dir.parent if source.model_dir.name == 'model' else source.model_dir}"
        " on node "
        f"{ctx.get_node_id()}"
    )
    log.info(
        "weights %s (%d bytes, sha256 %s) shipped through the object store (%s)",
        identity.name,
        nbytes,
        identity.sha256[:12],
        name,
    )
    shipped = ShippedWeights(
        identity.name,
        identity.sha256,
        identity.model_sha256,
        identity.tokenizer_sha256,
        source.max_context,
        source.random_weights,
        name,
        namespace,
        origin,
        tuple(sorted((rel, _sha256(data)) for rel, data in files.items())),
    )
    _SHIPPED.append(shipped)
    return shipped


def release(shipped: ShippedWeights | None) -> None:
    """Kill the weight store (``kronos serve`` stopping on a cluster that outlives it)."""
    if shipped is None:
        return
    import ray

    try:
        ray.kill(ray.get_actor(shipped.actor, namespace=shipped.namespace))
    except Exception:  # gone already
        pass


def release_all() -> None:
    """Kill every weight store this process shipped."""
    while _SHIPPED:
        release(_SHIPPED.pop())
