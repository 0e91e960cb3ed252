"""Checkpoint I/O in the published layout: a folder with ``config.json`` + ``model.safetensors``.

Only safetensors is read (no pickle). Every problem is a ``CheckpointError``
whose message names the file and the offending keys.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from kronos_core.model.config import ConfigError

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

# Buffers that inference recomputes; a checkpoint may carry them or not.
OPTIONAL_KEYS = re.compile(r"^tokenizer\.bsq\.(basis|group_basis)$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded; the message says exactly why."""


def resolve_checkpoint(path_or_hub_id: str | os.PathLike[str], revision: str | None = None) -> Path:
    """A local folder as is, or a Hugging Face Hub id downloaded to the local cache."""
    path = Path(path_or_hub_id).expanduser()
    if path.is_dir():
        return path
    text = str(path_or_hub_id)
    if path.exists():
        raise CheckpointError(
            f"{text} is a file; expected a folder with {CONFIG_NAME} and {WEIGHTS_NAME}"
        )
    if not HUB_ID.match(text):
        raise CheckpointError(
            f"no checkpoint folder at {text} (and it is not a Hub id like 'NeoQuasar/Kronos-small')"
        )
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise CheckpointError(
            f"{text} is not a local folder; downloading it from the Hub needs huggingface_hub "
            "(pip install 'kronos-portfolio[hub]'), or pass a local checkpoint folder"
        ) from exc
    try:
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            local = hf_hub_download(repo_id=text, filename=name, revision=revision)
    except Exception as exc:  # the hub raises many types: offline, 404, auth, timeouts
        raise CheckpointError(
            f"could not fetch {text} from the Hugging Face Hub ({type(exc).__name__}: {exc}). "
            "Offline or blocked network? Download the folder elsewhere and pass its local path."
        ) from exc
    return Path(local).parent


def read_config(folder: Path) -> dict[str, Any]:
    file = folder / CONFIG_NAME
    if not file.is_file():
        raise CheckpointError(f"{file} is missing")
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc}") from exc


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = folder / WEIGHTS_NAME
    if not file.is_file():
        found = sorted(p.name for p in folder.iterdir())
        hint = " (pickled .bin/.pt weights are not loaded, by design)" if any(
            n.endswith((".bin", ".pt", ".pth")) for n in found
        ) else ""
        raise CheckpointError(f"{file} is missing; the folder holds {found}{hint}")
    try:
        return load_file(str(file), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{file} is corrupt or truncated: {exc}") from exc


def load_state_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Copy ``state`` into ``module``, refusing missing, unknown or mis-shaped keys."""
    expected = module.state_dict()
    missing = sorted(k for k in expected.keys() - state.keys() if not OPTIONAL_KEYS.match(k))
    unknown = sorted(state.keys() - expected.keys())
    bad_shape = sorted(
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in state.keys() & expected.keys()
        if state[k].shape != expected[k].shape
    )
    problems = []
    if missing:
        problems.append(f"missing keys {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if unknown:
        problems.append(f"unknown keys {unknown[:10]}{' ...' if len(unknown) > 10 else ''}")
    if bad_shape:
        problems.append(f"shape mismatches {bad_shape[:10]}")
    if problems:
        raise CheckpointError(f"{source}: " + "; ".join(problems))
    try:
        module.load_state_dict(state, strict=False)
    except ValueError as exc:  # a module's own check of what it loaded (a load post-hook)
        raise CheckpointError(f"{source}: {exc}") from exc


if TYPE_CHECKING:
    # the type checker sees the mixin as what it is mixed into; at run time it adds no base class
    _MixinBase = torch.nn.Module
else:
    _MixinBase = object


_Pretrained = TypeVar("_Pretrained", bound="PretrainedMixin")


class PretrainedMixin(_MixinBase):
    """``from_pretrained`` / ``save_pretrained`` for a module with a ``config`` dataclass."""

    config_class: Any
    kind: str
    config: Any  # an instance of config_class, set by the module's __init__

    @classmethod
    def from_pretrained(
        cls: type[_Pretrained],
        path_or_hub_id: str | os.PathLike[str],
        revision: str | None = None,
        device: torch.device | str | None = None,
    ) -> _Pretrained:
        folder = resolve_checkpoint(path_or_hub_id, revision)
        try:
            config = cls.config_class.from_dict(read_config(folder))
        except ConfigError as exc:
            raise CheckpointError(f"{folder / CONFIG_NAME}: {exc}") from exc
        module = cls(config)
        load_state_strict(module, read_weights(folder), str(folder / WEIGHTS_NAME))
        module.eval()
        if device is not None:
            module.to(device)
        log.debug("loaded %s from %s", cls.__name__, folder)
        return module

    def save_pretrained(self, path: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (atomically) into ``path``."""
        from safetensors.torch import save_file

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        _atomic_write(
            folder / CONFIG_NAME,
            lambda f: f.write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True)),
        )
        _atomic_write(folder / WEIGHTS_NAME, lambda f: save_file(state, str(f)))
        return folder


def _atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
