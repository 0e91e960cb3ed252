"""Store versions: the manifest that names every symbol's file of the published version.

A versioned store has ``ROOT/_manifest.json``::

    {"format": "kronos-store-manifest", "version": 7, "published": "2026-12-05T13:00:00+00:00",
     "files": {"1d": {"AAPL": 7, "MSFT": 0, ...}, "5min": {...}}}

Each symbol's number is the generation of its file: 0 is the plain ``ROOT/<freq>/<symbol>.arrow``
(a store written before versions, or by ``KlineWriter.write`` on an unversioned store), ``g > 0``
the immutable ``ROOT/<freq>/_v/<symbol>.<g>.arrow`` written by the transaction that published
version ``g``. A transaction (``store_txn.py``) writes its files beside the live ones and then
replaces the manifest atomically: that one rename publishes all of them at once. A reader
resolves the manifest once per request and reads every symbol from the files it names, so a
request never mixes two versions; it never has to stat the symbol files (they never change).

A store without a manifest is version 0: its plain files are read as before. Files of a
generation above the published version belong to a transaction that died before publishing;
the next transaction removes them when it starts (``StoreLock`` guarantees no live writer
owns them), and so does ``kronos store gc``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kronos_core.base.atomic import write_bytes_atomically
from kronos_core.data.errors import CorruptFileError
from kronos_core.data.fileformat import SUFFIX

try:  # POSIX advisory locks; absent on Windows
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

MANIFEST_NAME = "_manifest.json"
MANIFEST_FORMAT = "kronos-store-manifest"
GENERATIONS_DIR = "_v"  # inside each frequency directory
STORE_LOCK_NAME = ".store.lock"
_GEN_FILE = re.compile(r"^(?P<symbol>.+)\.(?P<gen>[0-9]+)" + re.escape(SUFFIX) + "$")


class ManifestError(CorruptFileError):
    """The manifest cannot be read: the store's published version is unknown (every read of
    the store reports it)."""

    def __init__(self, message: str):
        super().__init__("*", message)


@dataclass(frozen=True)
class Manifest:
    """One published store version: ``files[frequency][symbol]`` is the generation of the
    symbol's file (see the module docstring). ``key``: (inode, size, mtime_ns) of the manifest
    file it was read from (None: built, not read)."""

    version: int
    files: dict[str, dict[str, int]] = field(default_factory=dict)
    published: str | None = None
    key: tuple[int, int, int] | None = None

    def path(self, root: str, frequency: str, symbol: str) -> str | None:
        """The file of ``symbol`` at ``frequency`` in this version, or None if it holds none."""
        gen = self.files.get(frequency, {}).get(symbol)
        if gen is None:
            return None
        return file_path(root, frequency, symbol, gen)

    def symbol_index(self) -> dict[str, list[str]]:
        """symbol -> the frequencies holding it."""
        index: dict[str, list[str]] = {}
        for freq in sorted(self.files):
            for symbol in self.files[freq]:
                index.setdefault(symbol, []).append(freq)
        return index

    def to_json(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT,
            "version": self.version,
            "published": self.published,
            "files": {f: dict(sorted(s.items())) for f, s in sorted(self.files.items()) if s},
        }
        return json.dumps(body, indent=0).encode()


def file_path(root: str, frequency: str, symbol: str, gen: int) -> str:
    """The file of ``symbol``'s generation ``gen`` (0: the plain, unversioned file)."""
    if gen == 0:
        return os.path.join(root, frequency, symbol + SUFFIX)
    return os.path.join(root, frequency, GENERATIONS_DIR, f"{symbol}.{gen}{SUFFIX}")


def generation_files(root: str | os.PathLike, frequency: str) -> list[tuple[str, int, Path]]:
    """``(symbol, generation, path)`` of every generation file of a frequency directory."""
    d = Path(root) / frequency / GENERATIONS_DIR
    out: list[tuple[str, int, Path]] = []
    try:
        entries = list(os.scandir(d))
    except FileNotFoundError:
        return out
    for e in entries:
        m = _GEN_FILE.match(e.name)
        if m and not e.name.startswith("."):
            out.append((m.group("symbol"), int(m.group("gen")), Path(e.path)))
    return out


def read_manifest(root: str | os.PathLike, cached: Manifest | None = None) -> Manifest | None:
    """The published manifest of the store at ``root`` (None: an unversioned store).
    ``cached``: returned as is when the manifest file has not changed since it was read."""
    path = os.path.join(root, MANIFEST_NAME)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    if cached is not None and cached.key == key:
        return cached
    try:
        with open(path, "rb") as fh:
            body = json.loads(fh.read())
        if body.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {MANIFEST_FORMAT!r}")
        files = {
            str(f): {str(s): int(g) for s, g in syms.items()} for f, syms in body["files"].items()
        }
        return Manifest(int(body["version"]), files, body.get("published"), key)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"store manifest {path} cannot be read: {exc}") from None


def publish(root: str | os.PathLike, version: int, files: dict[str, dict[str, int]],
            *, fsync: bool = True) -> Manifest:
    """Write ``files`` as the store's version ``version``: one atomic replace of the manifest
    (the moment every file of the version becomes visible together)."""
    manifest = Manifest(version, files, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    path = Path(root) / MANIFEST_NAME
    if fsync:
        write_bytes_atomically(path, manifest.to_json())
    else:
        tmp = path.with_name(f".{MANIFEST_NAME}.{os.getpid()}.tmp")
        tmp.write_bytes(manifest.to_json())
        os.replace(tmp, path)
    return manifest


class StoreLock:
    """Exclusive advisory lock on ``ROOT/.store.lock``: one transaction (import, compaction,
    gc) at a time per store. Readers never take it."""

    def __init__(self, root: str | os.PathLike):
        self.path = Path(root) / STORE_LOCK_NAME
        self.fd: int | None = None

    def __enter__(self) -> StoreLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is not None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
