"""One store transaction: many symbols' writes published together as one store version.

``KlineWriter.transaction()`` gives one (a context manager)::

    with store.transaction() as tx:
        tx.write("AAPL", frame_a)
        tx.write("MSFT", frame_b)
    # published here, as version tx.version, if the block raised nothing

Under the store lock (``versions.StoreLock``: one transaction at a time) it reads the
published manifest (an unversioned store's plain files become generation 0), removes what a
dead transaction left (files of unpublished generations, temporary files in ``_v``), and
writes each changed symbol to its new generation file ``ROOT/<freq>/_v/<symbol>.<version>.arrow``
beside the live ones. Nothing is visible to readers until ``commit`` replaces the manifest (one
atomic rename). An error, or a kill, before that leaves the published version as it was; the
files written so far are removed at once (error) or by the next transaction (kill). A
transaction whose writes changed nothing publishes nothing.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from kronos_core.base.atomic import fsync_dir
from kronos_core.data.errors import validate_symbol
from kronos_core.data.fileformat import SUFFIX, write_arrow_atomic, write_arrow_new
from kronos_core.data.store_merge import CandleArrays, SymbolUpdate
from kronos_core.data.versions import (
    GENERATIONS_DIR,
    Manifest,
    StoreLock,
    file_path,
    generation_files,
    publish,
)

log = logging.getLogger(__name__)


class TransactionStore(Protocol):
    """What a transaction needs of its store (``KlineWriter`` is one)."""

    root: Path

    def manifest(self) -> Manifest | None: ...

    def frequencies(self, manifest: Any = ...) -> list[str]: ...

    def symbols(self, frequency: str | None = None, manifest: Any = ...) -> list[str]: ...

    def symbol_update(
        self, symbol: str, frame: pd.DataFrame | CandleArrays, manifest: Any, *,
        frequency: str | None,
        timezone: str | None, source: str | None, on_overlap: str, overwrite: bool,
        extra_metadata: dict | None, missing: tuple[str, ...] = (),
    ) -> SymbolUpdate: ...


class StoreTransaction:
    """Writes of many symbols, published together (see the module docstring).

    ``base``: the version it started from; ``version``: the one it publishes; ``written``:
    ``{(frequency, symbol): path}`` of the files it wrote; ``published``: the new manifest
    after a commit that changed something (None otherwise)."""

    def __init__(self, store: TransactionStore, *, fsync: bool = True):
        self.store = store
        self.fsync = fsync
        self._lock = StoreLock(store.root)
        self.base: Manifest | None = None
        self.version = 0
        self._files: dict[str, dict[str, int]] = {}
        self.written: dict[tuple[str, str], str] = {}
        self.published: Manifest | None = None
        self._open = False

    # -- life cycle ------------------------------------------------------------------

    def __enter__(self) -> StoreTransaction:
        self.store.root.mkdir(parents=True, exist_ok=True)
        self._lock.__enter__()
        try:
            self.base = self.store.manifest() or _unversioned(self.store)
            self.version = self.base.version + 1
            self._files = copy.deepcopy(self.base.files)
            removed = remove_unpublished(self.store.root, self.base)
            if removed:
                log.info("store %s: removed %d file(s) of an import that did not finish",
                         self.store.root, len(removed))
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self._open = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.abort()
        finally:
            self._open = False
            self._lock.__exit__(None, None, None)

    def _view(self) -> Manifest:
        """The store as this transaction sees it: the base plus its own writes."""
        return Manifest(self.version, self._files)

    # -- writing -----------------------------------------------------------------------

    def write(self, symbol: str, frame: pd.DataFrame, **kw) -> dict:
        """Stage ``symbol``'s new candles (``KlineWriter.write``'s arguments); returns the
        metadata its file will have. A write that changes nothing stages nothing."""
        return self.update(symbol, frame, **kw).meta

    def update(self, symbol: str, frame: pd.DataFrame | CandleArrays, *,
               frequency: str | None = None,
               timezone: str | None = None, source: str | None = None,
               on_overlap: str = "error", overwrite: bool = False,
               extra_metadata: dict | None = None, missing: tuple[str, ...] = ()) -> SymbolUpdate:
        """``write``, returning the whole ``SymbolUpdate`` (rows before, whether it changed
        anything; its table dropped once written). ``missing``: the optional columns the
        source lacked (``store_merge.next_content``). ``frame``: a candle frame, or
        ``store_merge.CandleArrays``."""
        if not self._open:
            raise RuntimeError("the transaction is not open (use it in a with block)")
        validate_symbol(symbol)
        update = self.store.symbol_update(
            symbol, frame, self._view(), frequency=frequency, timezone=timezone, source=source,
            on_overlap=on_overlap, overwrite=overwrite, extra_metadata=extra_metadata,
            missing=missing,
        )
        if update.table is None:
            return update
        freq = update.meta["frequency"]
        path = file_path(str(self.store.root), freq, symbol, self.version)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # synced at commit, all files together. A symbol this transaction wrote before gets a
        # new inode (its old file may still be mapped); else the path is new (the files of dead
        # transactions were removed when this one began) and is written in place
        if (freq, symbol) in self.written:
            write_arrow_atomic(Path(path), update.table, fsync=False)
        else:
            write_arrow_new(Path(path), update.table)
        self._files.setdefault(freq, {})[symbol] = self.version
        self.written[(freq, symbol)] = path
        update.table = None
        return update

    def commit(self) -> Manifest | None:
        """Publish the staged files as version ``version`` (nothing if none was staged)."""
        if not self.written:
            return None
        if self.fsync:  # the files, then their folders, then the manifest that names them
            fsync_all(list(self.written.values()))
            for d in {os.path.dirname(p) for p in self.written.values()}:
                fsync_dir(Path(d))
        self.published = publish(self.store.root, self.version, self._files, fsync=self.fsync)
        log.debug("store %s: published version %d (%d file(s))", self.store.root,
                  self.version, len(self.written))
        return self.published

    def abort(self) -> None:
        """Remove the staged files; the published version stays as it was."""
        for path in self.written.values():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.written.clear()
        self._files = copy.deepcopy(self.base.files) if self.base is not None else {}


FSYNC_THREADS = 16


def fsync_all(paths: list[str]) -> None:
    """fsync every file, several at once: a day's import writes a file per symbol, and
    concurrent fsyncs share the file system's journal commits (one at a time, 1,000 files
    took 4 s here). Raises the first error."""

    def one(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def chunk(part: list[str]) -> None:
        for p in part:
            one(p)

    if len(paths) < 4:
        chunk(paths)
        return
    from concurrent.futures import ThreadPoolExecutor

    n = min(FSYNC_THREADS, len(paths))
    with ThreadPoolExecutor(n) as pool:  # a chunk per thread: 16 futures, not one per file
        for _ in pool.map(chunk, [paths[k::n] for k in range(n)]):  # re-raises a failure
            pass


def _unversioned(store: TransactionStore) -> Manifest:
    """An unversioned store as version 0: every plain file, generation 0."""
    files = {f: {s: 0 for s in store.symbols(f, None)} for f in store.frequencies(None)}
    return Manifest(0, files)


def remove_unpublished(root: str | os.PathLike, published: Manifest) -> list[Path]:
    """Remove what transactions that never published left behind: generation files above
    the published version and temporary files in the generation folders. Only safe under
    the store lock (no live transaction owns them). Returns the removed paths."""
    removed: list[Path] = []
    root = Path(root)
    try:
        freqs = [e.name for e in os.scandir(root) if e.is_dir()]
    except FileNotFoundError:
        return removed
    for freq in freqs:
        for _, gen, path in generation_files(root, freq):
            if gen > published.version:
                _unlink(path, removed)
        gdir = root / freq / GENERATIONS_DIR
        try:
            entries = list(os.scandir(gdir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if e.name.startswith(".") and e.name.endswith(".tmp") and SUFFIX in e.name:
                _unlink(Path(e.path), removed)
    return removed


def _unlink(path: Path, removed: list[Path]) -> None:
    try:
        path.unlink()
        removed.append(path)
    except FileNotFoundError:
        pass
