"""Backup and restore of a forecast ledger folder, safe while the service writes it.

Why a copy taken while gateways run is consistent: forecast and score files are written once
(to a temporary name, then renamed) and never rewritten, so a file is copied whole or not
seen at all. What a scoring pass changes together (new score files, the day's ``complete``
lists) changes only under the scorers' lock (``<ledger>/.score.lock``): ``backup`` holds that
lock while it lists and copies, so a pass waits and the copy never holds half of one. Forecasts
recorded during the copy are either in it (whole) or not (they wait for the next backup). The
online calibration states are replaced atomically, each one whole; one may be a pass behind
the scores beside it, which its next update absorbs (its version says which it is).

Layout of a backup folder: the ledger's files at their own relative paths, plus
``MANIFEST_NAME``, the list of every file with its size and SHA-256. ``restore`` checks every
file against it before anything is moved into place, and writes a new folder (never into a
ledger that holds files: merging two ledgers could score a step twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kronos_core.data.fileformat import SymbolLock
from kronos_core.ledger.errors import LedgerError
from kronos_core.ledger.scoring import LOCK_NAME

MANIFEST_NAME = "kronos-ledger-backup.json"
FORMAT = 1
_CHUNK = 1 << 20


class BackupError(LedgerError):
    """A backup or restore that cannot be made; the message names the folder or file."""


@dataclass(frozen=True)
class BackupReport:
    """What ``backup`` or ``restore`` did."""

    folder: Path  # the backup (backup) or the restored ledger (restore)
    files: int  # files copied
    bytes: int  # their total size
    vanished: int = 0  # files listed but removed before their copy (retention ran meanwhile)


def _is_state(rel: Path) -> bool:
    """Whether a ledger file belongs in a backup: not a lock, a temporary file of a write in
    progress, or a start-up write check (all hidden or ``*.lock``)."""
    return not any(part.startswith(".") for part in rel.parts) and rel.suffix != ".lock"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _fresh_folder(target: Path, what: str) -> Path:
    """A temporary folder beside ``target`` (renamed onto it when complete); ``target`` must not
    exist or be empty."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BackupError(
            f"{what} {target} exists and is not empty: name a new folder (or move that one aside)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))


def _move_into_place(tmp: Path, target: Path) -> None:
    if target.exists():
        target.rmdir()  # empty (checked by _fresh_folder)
    os.replace(tmp, target)


def backup(ledger_dir: str | os.PathLike, dest: str | os.PathLike) -> BackupReport:
    """Copy the ledger at ``ledger_dir`` to the new folder ``dest`` while writers may run (see
    the module's docstring). Raises ``BackupError`` for a missing ledger or a used ``dest``."""
    root, target = Path(ledger_dir), Path(dest)
    if not root.is_dir():
        raise BackupError(f"no ledger at {root} (KRONOS_LEDGER_DIR, --ledger)")
    if target.resolve().is_relative_to(root.resolve()):
        raise BackupError(f"the backup folder {target} is inside the ledger {root}")
    tmp = _fresh_folder(target, "the backup folder")
    files: dict[str, list] = {}
    vanished = 0
    try:
        with SymbolLock(root, LOCK_NAME):  # no scoring pass changes scores while we copy
            listed = sorted(p for p in root.rglob("*") if p.is_file())
            for src in listed:
                rel = src.relative_to(root)
                if not _is_state(rel):
                    continue
                out = tmp / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(src, out)
                except FileNotFoundError:  # removed by retention after the listing
                    vanished += 1
                    continue
                files[rel.as_posix()] = [out.stat().st_size, _sha256(out)]
        manifest = {
            "format": FORMAT,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": str(root.resolve()),
            "files": files,
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
        _move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BackupReport(target, len(files), sum(size for size, _ in files.values()), vanished)


def read_manifest(backup_dir: str | os.PathLike) -> dict:
    """The backup's manifest (``BackupError`` when it is missing or not one)."""
    path = Path(backup_dir) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path}: not a ledger backup ({exc})") from None
    if manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
        raise BackupError(f"{path}: unknown backup format {manifest.get('format')!r}")
    return manifest


def verify(backup_dir: str | os.PathLike) -> dict:
    """Check every file of a backup against its manifest; the manifest, or ``BackupError``
    naming the first file that is missing or differs."""
    folder = Path(backup_dir)
    manifest = read_manifest(folder)
    for rel, (size, digest) in sorted(manifest["files"].items()):
        path = folder / rel
        try:
            got_size = path.stat().st_size
        except OSError:
            raise BackupError(f"backup {folder}: {rel} is missing") from None
        if got_size != size or _sha256(path) != digest:
            raise BackupError(f"backup {folder}: {rel} differs from the manifest (damaged)")
    return manifest


def restore(backup_dir: str | os.PathLike, ledger_dir: str | os.PathLike) -> BackupReport:
    """Bring a backup back as the ledger at ``ledger_dir``, which must not exist or be empty
    (stop the service, or point it at the restored folder). Every file is checked against the
    manifest first; the folder appears whole (renamed into place) or not at all."""
    source, target = Path(backup_dir), Path(ledger_dir)
    manifest = verify(source)
    tmp = _fresh_folder(target, "the ledger folder")
    total = 0
    try:
        for rel, (size, _) in sorted(manifest["files"].items()):
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, out)
            total += size
        _move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BackupReport(target, len(manifest["files"]), total)
