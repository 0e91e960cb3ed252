"""Writing the Arrow K-line store: ``KlineWriter`` adds candles to a symbol's file
(merged by timestamp) and writes each frequency directory's read snapshot (``compact``).
See ``docs/store.md``.

In a versioned store (one with ``_manifest.json``) every write is a transaction
(``store_txn.StoreTransaction``): new files beside the live ones, published together as one
new store version. In an unversioned store ``write`` replaces the symbol's file atomically in
place (a new inode), under the symbol's lock, as before versions existed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import pandas as pd

from kronos_core.base.candles import CandleError
from kronos_core.data.errors import (
    StoreError,
    SymbolError,
    UnknownSymbolError,
    validate_frequency,
    validate_symbol,
)
from kronos_core.data.fileformat import (
    FileEntry,
    SymbolLock,
    open_file,
    stat_key,
    symbol_file,
    write_arrow_atomic,
)
from kronos_core.data.snapshot import SNAPSHOT_NAME, write_snapshot
from kronos_core.data.store_dir import CURRENT, StoreDirectory
from kronos_core.data.store_merge import CandleArrays, SymbolUpdate, new_candles, next_content
from kronos_core.data.store_txn import StoreTransaction
from kronos_core.data.versions import Manifest, StoreLock

log = logging.getLogger(__name__)


class KlineWriter(StoreDirectory):
    """Writes a directory of Arrow K-line files. ``frequency``: the default frequency
    sub-directory for writes (None: the symbol's existing one, else inferred from the
    candles)."""

    def compact(self, frequency: str | None = None, *, fsync: bool = True) -> dict[str, dict]:
        """Write each frequency directory's read snapshot ``_snapshot.arrow``.

        ``frequency``: one directory (default: the store's ``frequency``, else every
        frequency directory). The snapshot holds every readable symbol's rows in one
        Arrow IPC file plus an index (symbol, position, rows, and the inode, size and
        mtime of the symbol's file when compacted). Reads then open one mapping per
        frequency instead of one per symbol; a symbol whose file changed since (an
        append, a replace) is read from its file, so the per-symbol files stay the
        source of truth. Files that cannot be read are left out (their reads keep
        reporting their error). A directory without symbols loses its snapshot.
        Written atomically. Returns ``{frequency: {"symbols", "rows", "skipped", "path"}}``
        with ``skipped`` the left-out symbols' ``SymbolError``.
        """
        frequency = frequency or self.frequency
        report: dict[str, dict] = {}
        with StoreLock(self.root):  # one compaction (or transaction) at a time
            m = self.manifest()
            freqs = [validate_frequency(frequency)] if frequency else self.frequencies(m)
            for freq in freqs:
                report.update(self._compact_one(freq, m, fsync))
        return report

    def _compact_one(self, freq: str, m: Manifest | None, fsync: bool) -> dict[str, dict]:
        directory = self.root / freq
        if not directory.is_dir():
            return {}
        path = directory / SNAPSHOT_NAME
        items = []
        skipped: list[SymbolError] = []
        # the caller (compact) holds the store lock
        for symbol in self.symbols(freq, m):
            named = m.path(str(self.root), freq, symbol) if m is not None else None
            file = named or str(symbol_file(directory, symbol))
            try:
                # stat first: if the file is replaced before it is opened, the
                # entry is keyed by the old file and is never used
                key = stat_key(os.stat(file))
                entry = open_file(symbol, file, key, freq)
                items.append((symbol, key, entry, entry.meta))
            except FileNotFoundError:
                continue
            except StoreError as exc:
                log.warning("compact: leaving out %s", exc)
                skipped.append(exc.to_error())
        count = len(items)
        if items:
            rows = write_snapshot(path, freq, items, fsync=fsync)
        else:
            rows = 0
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        del items
        return {freq: {"symbols": count, "rows": rows, "skipped": skipped, "path": str(path)}}

    def transaction(self, *, fsync: bool = True) -> StoreTransaction:
        """A ``StoreTransaction`` on this store (a context manager): its writes are published
        together as one new store version when the block ends without an error, and discarded
        otherwise. The first transaction makes an unversioned store versioned."""
        return StoreTransaction(self, fsync=fsync)

    def write(
        self,
        symbol: str,
        frame: pd.DataFrame,
        *,
        frequency: str | None = None,
        timezone: str | None = None,
        source: str | None = None,
        on_overlap: str = "error",
        overwrite: bool = False,
        extra_metadata: dict | None = None,
        fsync: bool = True,
    ) -> dict:
        """Add candles to ``symbol`` (creating it), atomically; returns the new metadata.

        ``frame``: a ``timestamps`` column (or DatetimeIndex) and the six ``FEATURES``
        columns, already validated (see ``kronos_core.data.validate``); it is
        re-checked for order, duplicates and NaN, and its bar steps against the series'
        frequency (or ``frequency``). Stored history is kept: the new
        candles are merged in by timestamp. Where a timestamp is both stored and new
        with different values, ``on_overlap`` decides: ``"error"`` (raise
        ``CandleError``), ``"keep"`` (keep stored) or ``"replace"`` (take new).
        Identical overlapping candles are simply not duplicated, and a write that changes
        nothing writes nothing. ``overwrite=True`` replaces the whole history. In a versioned
        store this is a one-symbol transaction (a new store version).
        """
        kw: dict[str, Any] = dict(
            frequency=frequency, timezone=timezone, source=source, on_overlap=on_overlap,
            overwrite=overwrite, extra_metadata=extra_metadata,
        )
        if self.manifest() is not None:
            with self.transaction(fsync=fsync) as tx:
                return tx.write(symbol, frame, **kw)
        validate_symbol(symbol)
        if on_overlap not in ("error", "keep", "replace"):
            raise ValueError(f"on_overlap must be 'error', 'keep' or 'replace', got {on_overlap!r}")
        ts_new, _, _ = new_candles(symbol, frame, timezone)
        frequency, _, _ = self.target_frequency(symbol, ts_new, frequency, None)
        directory = self.root / frequency
        directory.mkdir(parents=True, exist_ok=True)
        path = symbol_file(directory, symbol)
        with SymbolLock(directory, symbol):
            update = self.symbol_update(symbol, frame, None, **kw)
            if update.table is not None:
                write_arrow_atomic(path, update.table, fsync=fsync)
        return update.meta

    def target_frequency(
        self, symbol: str, ts_new: np.ndarray, frequency: str | None, manifest: Any = CURRENT
    ) -> tuple[str, str, str | None]:
        """``(frequency, where from, stored file or None)`` of a write of ``symbol``: the
        given one (``"given"``, or ``"stored"`` when the series is stored there), else the
        stored series' (``"stored"``), else inferred from the candles (``"inferred"``)."""
        frequency = frequency or self.frequency
        if frequency is not None:
            validate_frequency(frequency)
            try:
                path, _, _ = self._locate(symbol, frequency, None, manifest)
                return frequency, "stored", path
            except UnknownSymbolError:
                return frequency, "given", None
        try:
            path, existing, _ = self._locate(symbol, None, None, manifest)
            return existing, "stored", path
        except UnknownSymbolError:  # a new symbol (AmbiguousSymbolError propagates)
            pass
        if len(ts_new) < 2:
            raise CandleError(
                f"{symbol}: cannot infer the frequency of one candle; pass frequency="
            )
        from kronos_core.data.sessions import infer_frequency

        return infer_frequency(ts_new), "inferred", None

    def symbol_update(
        self,
        symbol: str,
        frame: pd.DataFrame | CandleArrays,
        manifest: Any,
        *,
        frequency: str | None,
        timezone: str | None,
        source: str | None,
        on_overlap: str,
        overwrite: bool,
        extra_metadata: dict | None,
        missing: tuple[str, ...] = (),
    ) -> SymbolUpdate:
        """What writing ``frame`` to ``symbol`` in ``manifest``'s version comes to
        (``store_merge.next_content``; ``missing``: the optional columns the source lacked);
        reads the stored file, writes nothing."""
        validate_symbol(symbol)
        if on_overlap not in ("error", "keep", "replace"):
            raise ValueError(f"on_overlap must be 'error', 'keep' or 'replace', got {on_overlap!r}")
        ts_new, val_new, timezone = new_candles(symbol, frame, timezone)
        freq, where, path = self.target_frequency(symbol, ts_new, frequency, manifest)
        old: FileEntry | None = None
        if path is not None and not overwrite:
            old = open_file(symbol, path, stat_key(os.stat(path)), freq)
        update = next_content(
            symbol, ts_new, val_new, timezone, old, frequency=freq, frequency_from=where,
            source=source, on_overlap=on_overlap, extra_metadata=extra_metadata, missing=missing,
        )
        log.debug("%s: %s", symbol, update.report)
        return update
