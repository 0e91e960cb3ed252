"""Store housekeeping: ``verify`` a store's consistency and ``gc`` what writers left behind
(``kronos store verify|compact|gc``; see ``docs/store.md``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.data.errors import StoreError
from kronos_core.data.fileformat import SUFFIX, open_file, stat_key
from kronos_core.data.snapshot import SNAPSHOT_NAME, SnapshotError, open_snapshot
from kronos_core.data.store_dir import StoreDirectory
from kronos_core.data.versions import (
    GENERATIONS_DIR,
    Manifest,
    StoreLock,
    file_path,
    generation_files,
)

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

DEFAULT_GRACE_S = 3600.0


@dataclass
class VerifyReport:
    """What ``verify`` found: the version checked, the files read, and the problems (each
    naming its file)."""

    version: int
    files: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(root: str | os.PathLike) -> VerifyReport:
    """Check every file of the published version: readable Arrow with the store's schema,
    timestamps sorted and unique, values finite, and metadata consistent (symbol, frequency,
    rows, first and last agree with the file's place and rows); each frequency's read
    snapshot, if present, readable. Reads only."""
    store = StoreDirectory(root)
    try:
        m = store.manifest()
    except StoreError as exc:
        return VerifyReport(-1, problems=[str(exc)])
    report = VerifyReport(0 if m is None else m.version)
    if not Path(root).is_dir():
        report.problems.append(f"{root}: no such store folder")
        return report
    for freq, symbol, path in _published_files(store, m):
        report.files += 1
        try:
            entry = open_file(symbol, path, stat_key(os.stat(path)), freq)
            meta = entry.meta
        except FileNotFoundError:
            report.problems.append(f"{path}: missing (version {report.version} names it)")
            continue
        except StoreError as exc:
            report.problems.append(str(exc))
            continue
        report.rows += len(entry.ts)
        report.problems += [f"{path}: {p}" for p in _meta_problems(meta, entry, symbol, freq)]
        bad = [name for name, c in zip(("open", "high", "low", "close", "volume", "amount"),
                                       entry.cols) if not np.isfinite(c).all()]
        if bad:
            report.problems.append(f"{path}: NaN or infinite values in {bad}")
    for freq in store.frequencies(m):
        snap = Path(root) / freq / SNAPSHOT_NAME
        if snap.exists():
            try:
                open_snapshot(str(snap), stat_key(snap.stat()), freq)
            except (SnapshotError, StoreError, OSError) as exc:
                report.problems.append(
                    f"{snap}: unusable read snapshot ({exc}); rewrite it with kronos store compact"
                )
    return report


def _published_files(
    store: StoreDirectory, m: Manifest | None
) -> Iterator[tuple[str, str, str]]:
    root = str(store.root)
    for freq in store.frequencies(m):
        for symbol in store.symbols(freq, m):
            path = m.path(root, freq, symbol) if m is not None else None
            yield freq, symbol, path or file_path(root, freq, symbol, 0)


def _meta_problems(meta: dict, entry, symbol: str, freq: str) -> list[str]:
    out = []
    raw = entry.raw_meta
    if raw is None:
        return ["no kronos metadata"]
    for key, want in (("symbol", symbol), ("frequency", freq)):
        if meta.get(key) != want:
            out.append(f"metadata {key} is {meta.get(key)!r}, the file's place says {want!r}")
    written = json.loads(raw)
    if "rows" in written and written["rows"] != len(entry.ts):
        out.append(f"metadata rows is {written['rows']}, the file holds {len(entry.ts)}")
    if len(entry.ts):
        for key, i in (("first", 0), ("last", -1)):
            want = str(pd.Timestamp(int(entry.ts[i])))
            if key in written and written[key] != want:
                out.append(f"metadata {key} is {written[key]!r}, the file's is {want!r}")
    return out


@dataclass
class GcReport:
    """What ``gc`` removed (or would remove, ``dry_run``), and the bytes."""

    removed: list[str] = field(default_factory=list)
    bytes: int = 0
    kept_young: int = 0  # candidates younger than the grace period, left for a later gc


def gc(root: str | os.PathLike, grace_s: float = DEFAULT_GRACE_S,
       dry_run: bool = False) -> GcReport:
    """Remove what is not part of the published version, once older than ``grace_s``:
    temporary files of killed writes, files of unpublished versions (an import that died),
    files of superseded versions (a reader that resolved an older version a moment ago may
    still open them: hence the grace period, counted from when they were superseded), and
    empty per-symbol lock files nobody holds. Runs under the store lock."""
    report = GcReport()
    now = time.time()
    rootp = Path(root)
    store = StoreDirectory(root)
    with StoreLock(root):
        m = store.manifest()
        candidates: list[tuple[Path, float]] = []  # (path, since when it is garbage)
        for path in _temp_files(rootp):
            candidates.append((path, path.stat().st_mtime))
        if m is not None:
            candidates += _unreferenced(rootp, m)
        for path, since in candidates:
            if now - since < grace_s:
                report.kept_young += 1
                continue
            _remove(path, report, dry_run)
        for lock in _lock_files(rootp):
            _remove_lock(lock, report, dry_run)
    return report


def _temp_files(root: Path) -> Iterator[Path]:
    for d in _folders(root):
        for e in os.scandir(d):
            if e.is_file() and e.name.startswith(".") and e.name.endswith(".tmp"):
                yield Path(e.path)


def _folders(root: Path) -> list[Path]:
    out = [root]
    for e in os.scandir(root):
        if e.is_dir() and not e.name.startswith("."):
            out.append(Path(e.path))
            g = Path(e.path) / GENERATIONS_DIR
            if g.is_dir():
                out.append(g)
    return out


def _unreferenced(root: Path, m: Manifest) -> list[tuple[Path, float]]:
    """Files of generations the manifest does not name, each with when it became garbage:
    an unpublished one (above the version) when it was written; a superseded one when the
    symbol's current file was written (it replaced it then)."""
    out: list[tuple[Path, float]] = []
    for e in os.scandir(root):
        if not e.is_dir() or e.name.startswith((".", "_")):
            continue
        freq = e.name
        named = m.files.get(freq, {})

        def superseded_at(symbol: str, path: Path, freq: str = freq) -> float:
            current = m.path(str(root), freq, symbol)
            try:
                return os.stat(current).st_mtime if current else path.stat().st_mtime
            except FileNotFoundError:
                return path.stat().st_mtime

        for symbol, gen, path in generation_files(root, freq):
            if named.get(symbol) == gen:
                continue
            since = path.stat().st_mtime if gen > m.version else superseded_at(symbol, path)
            out.append((path, since))
        for f in os.scandir(e.path):  # plain (generation 0) files no longer named
            if f.is_file() and f.name.endswith(SUFFIX) and f.name[0] not in "._":
                symbol = f.name[: -len(SUFFIX)]
                if named.get(symbol) != 0:
                    out.append((Path(f.path), superseded_at(symbol, Path(f.path))))
    return out


def _lock_files(root: Path) -> Iterator[Path]:
    for d in _folders(root):
        for e in os.scandir(d):
            if (e.is_file() and e.name.startswith(".") and e.name.endswith(".lock")
                    and e.name != ".store.lock" and e.stat().st_size == 0):
                yield Path(e.path)


def _remove(path: Path, report: GcReport, dry_run: bool) -> None:
    try:
        size = path.stat().st_size
        if not dry_run:
            path.unlink()
    except FileNotFoundError:
        return
    report.removed.append(str(path))
    report.bytes += size


def _remove_lock(path: Path, report: GcReport, dry_run: bool) -> None:
    """An empty lock file, removed only while gc holds it itself (nobody is writing)."""
    if fcntl is None:  # pragma: no cover
        return
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # held: a write is under way
    try:
        _remove(path, report, dry_run)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
