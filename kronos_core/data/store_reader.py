"""Reading the Arrow K-line store: ``KlineReader`` (symbols, metadata, whole series, and
the batch window read the service and the evaluation use). See ``docs/store.md``.

Reads memory-map the file and slice the tail of each column without copying the
file; only the requested window is copied out, into each symbol's own array. Opened
files are cached per reader and re-opened when a file's inode, size or mtime changes
(every write replaces the file atomically, so a new inode).

Read snapshot: a fresh reader opens one mapping per frequency from
``ROOT/<frequency>/_snapshot.arrow`` (written by ``KlineWriter.compact``) instead of one
per symbol: a symbol whose file still has the indexed inode, size and mtime is sliced
from the snapshot; any other (appended, replaced, new) is read from its own file, which
stays the source of truth. An unusable snapshot is logged and ignored, never a read error.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kronos_core.base.candles import FEATURES
from kronos_core.data.errors import NoDataError, StoreError, SymbolError, validate_symbol
from kronos_core.data.fileformat import TIME_COLUMN, FileEntry, open_file, stat_key
from kronos_core.data.snapshot import SNAPSHOT_NAME, Snapshot, open_snapshot
from kronos_core.data.store_dir import CURRENT, StoreDirectory
from kronos_core.data.timestamps import template_history

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SymbolWindow:
    """One symbol's window of a batch read, unpadded.

    ``values`` (L, 6) float32 in ``FEATURES`` order; ``timestamps`` (L,)
    datetime64[ns], naive local wall clock; ``metadata`` the symbol's metadata
    (frequency, timezone, session_timezone, exchange, ...); ``last_stored`` the
    symbol's last stored candle, which is after ``timestamps[-1]`` when ``as_of``
    cut the window; ``held`` the candles the symbol holds at or before ``as_of`` (None:
    not known, take the window's length), so a caller can tell a lookback cut history;
    ``template_stamps`` the stamps the future's session template learns from when the metadata
    names no calendar (``kronos_core.data.timestamps.template_history``; None: it names one).
    """

    symbol: str
    values: np.ndarray
    timestamps: np.ndarray
    metadata: dict
    last_stored: np.datetime64
    held: int | None = None
    template_stamps: np.ndarray | None = None



@dataclass
class WindowBatch:
    """A batch read: ``windows`` of the symbols that succeeded, in request order, and
    ``errors`` of the others."""

    windows: list[SymbolWindow] = field(default_factory=list)
    errors: list[SymbolError] = field(default_factory=list)
    store_version: int = 0  # the one store version every window was read from

    @property
    def symbols(self) -> list[str]:
        """The symbols that succeeded, in request order."""
        return [w.symbol for w in self.windows]

    def __len__(self) -> int:
        return len(self.windows)


def _as_ns(value: Any, timezone: str | None) -> int:
    """A point in time as int64 ns on the symbol's naive local wall clock."""
    ts = pd.Timestamp(value)
    if ts is pd.NaT:
        raise ValueError(f"as_of {value!r} is not a time")
    if ts.tzinfo is not None:
        ts = ts.tz_convert(timezone or "UTC").tz_localize(None)
    return int(ts.as_unit("ns").value)


class KlineReader(StoreDirectory):
    """Reads a directory of Arrow K-line files; see ``docs/store.md`` for the layout.

    ``frequency``: the default frequency sub-directory for reads. When it is None a read
    finds the symbol in whichever frequency directory holds it (an error if several do
    and none is chosen).

    ``snapshot``: open files from the frequency directory's ``_snapshot.arrow`` (see
    ``KlineWriter.compact``) when they are unchanged since it was written (the default);
    False always maps the per-symbol files. ``opened`` counts how files were opened:
    ``{"snapshot": ..., "file": ...}``.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        frequency: str | None = None,
        *,
        cache_size: int = 65536,
        snapshot: bool = True,
    ):
        StoreDirectory.__init__(self, root, frequency)
        self.cache_size = int(cache_size)
        self.use_snapshot = bool(snapshot)
        self.opened = {"snapshot": 0, "file": 0}
        self._cache: dict[tuple[str, str | None], FileEntry] = {}
        self._snapshots: dict[str, tuple[tuple[int, int, int], Snapshot | None]] = {}
        self._lock = threading.Lock()
        self._root_str = str(self.root)

    # -- opening -----------------------------------------------------------------

    def _snapshot(self, frequency: str, memo: dict | None = None) -> Snapshot | None:
        """The frequency directory's snapshot, re-opened when its file changed (checked
        once per ``memo``, i.e. per batch read); None if absent or unusable."""
        if memo is not None and frequency in memo:
            return memo[frequency]
        path = os.path.join(self.root, frequency, SNAPSHOT_NAME)
        snap = None
        try:
            key = stat_key(os.stat(path))
        except OSError:
            key = None
        if key is not None:
            cached = self._snapshots.get(frequency)
            if cached is not None and cached[0] == key:
                snap = cached[1]
            else:
                try:
                    snap = open_snapshot(path, key, frequency)
                except Exception as exc:  # a bad snapshot costs speed, never a read
                    log.warning("ignoring snapshot %s, reading per-symbol files: %s", path, exc)
                with self._lock:
                    self._snapshots[frequency] = (key, snap)
        if memo is not None:
            memo[frequency] = snap
        return snap

    def _entry(
        self, symbol: str, frequency: str | None, index=None, snaps=None, manifest: Any = CURRENT
    ) -> FileEntry:
        """The opened file of ``symbol`` in ``manifest``'s version (default: the published
        one). In a versioned store files never change, so a cached entry is current when the
        manifest still names its path (no stat); in an unversioned one it is re-stat-ed."""
        m = self._resolve(manifest)
        # only validated symbols are ever cached, so a hit needs no new check
        entry = self._cache.get((symbol, frequency)) if type(symbol) is str else None
        if entry is not None:
            if m is not None:
                if m.path(self._root_str, entry.frequency, symbol) == entry.path and (
                    frequency is not None
                    or sum(symbol in syms for syms in m.files.values()) == 1
                ):
                    return entry
            else:
                try:
                    st = os.stat(entry.path)
                    if (st.st_ino, st.st_size, st.st_mtime_ns) == entry.key:
                        return entry
                except FileNotFoundError:
                    pass
        validate_symbol(symbol)
        cache_key = (symbol, frequency)
        if callable(index):
            index = index()
        path, freq, st = self._locate(symbol, frequency, index, m)
        key = stat_key(st)
        entry = None
        if self.use_snapshot:
            snap = self._snapshot(freq, snaps)
            if snap is not None:
                try:
                    entry = snap.entry(symbol, path, key)
                except Exception as exc:  # this symbol from its file
                    log.warning("snapshot %s: %s; reading %s", snap.path, exc, path)
        if entry is not None:
            self.opened["snapshot"] += 1
        else:
            entry = open_file(symbol, path, key, freq)
            self.opened["file"] += 1
        with self._lock:
            if len(self._cache) >= self.cache_size:  # drop the oldest half
                for k in list(self._cache)[: max(1, len(self._cache) // 2)]:
                    del self._cache[k]
            self._cache[cache_key] = entry
        return entry

    def clear_cache(self) -> None:
        """Forget opened files and snapshots (their mappings are released once no array
        uses them)."""
        with self._lock:
            self._cache.clear()
            self._snapshots.clear()

    def preload(
        self, symbols: Iterable[str] | None = None, frequency: str | None = None
    ) -> list[SymbolError]:
        """Open and cache the files of ``symbols`` (default: all), e.g. at service start."""
        frequency = frequency or self.frequency
        errors = []
        snaps: dict = {}
        for s in self.symbols(frequency) if symbols is None else symbols:
            try:
                self._entry(s, frequency, None, snaps)
            except StoreError as exc:
                errors.append(exc.to_error())
        return errors

    # -- reading -----------------------------------------------------------------

    def metadata(self, symbol: str, frequency: str | None = None) -> dict:
        """The symbol's metadata: frequency, timezone, source, rows, first, last, ...

        Raises ``InvalidSymbolError``, ``UnknownSymbolError``, ``AmbiguousSymbolError`` or
        ``CorruptFileError``.
        """
        entry = self._entry(symbol, frequency or self.frequency)
        meta = dict(entry.meta)
        if len(entry.ts):
            meta["first"] = str(pd.Timestamp(int(entry.ts[0])))
            meta["last"] = str(pd.Timestamp(int(entry.ts[-1])))
        return meta

    def read(self, symbol: str, frequency: str | None = None, start=None, end=None,
             manifest: Any = CURRENT) -> pd.DataFrame:
        """All candles of ``symbol`` (optionally ``start <= t <= end``) as a DataFrame (a copy).
        ``manifest``: the store version to read (``manifest()`` taken once, so that reads of
        several symbols come from one version; default: the published one now)."""
        entry = self._entry(symbol, frequency or self.frequency, None, None, manifest)
        tz = entry.meta.get("timezone")
        lo = 0 if start is None else int(np.searchsorted(entry.ts, _as_ns(start, tz), "left"))
        hi = (
            len(entry.ts)
            if end is None
            else int(np.searchsorted(entry.ts, _as_ns(end, tz), "right"))
        )
        data = {TIME_COLUMN: entry.ts[lo:hi].astype("datetime64[ns]")}
        for name, col in zip(FEATURES, entry.cols):
            data[name] = col[lo:hi].copy()
        return pd.DataFrame(data)

    def read_windows(
        self,
        symbols: Sequence[str],
        lookback: int,
        as_of=None,
        frequency: str | None = None,
    ) -> WindowBatch:
        """The last ``lookback`` candles at or before ``as_of`` of each symbol, each
        symbol's window unpadded with its metadata and last stored candle.

        ``as_of``: None (latest), or a time; a naive time is each symbol's local wall
        clock, an aware one is converted to each symbol's time zone. A symbol that
        fails (invalid, unknown, corrupt, no candles up to ``as_of``) is reported in
        ``errors`` and left out; the others still come back.
        """
        if isinstance(symbols, str):
            raise TypeError("symbols must be a sequence of symbols, not one string")
        lookback = int(lookback)
        if lookback < 1:
            raise ValueError(f"lookback must be >= 1, got {lookback}")
        frequency = frequency or self.frequency
        naive_as_of: int | None = None
        aware = False
        if as_of is not None:
            t = pd.Timestamp(as_of)
            if t is pd.NaT:
                raise ValueError(f"as_of {as_of!r} is not a time")
            aware = t.tzinfo is not None
            if not aware:
                naive_as_of = int(t.as_unit("ns").value)
        tz_cache: dict[str | None, int] = {}
        listing: list[dict] = []

        def index():  # one directory listing per call, only if needed
            if frequency is not None or len(symbols) < 16 or m is not None:
                return None
            if not listing:
                listing.append(self._symbol_index(None))
            return listing[0]

        windows: list[SymbolWindow] = []
        errors: list[SymbolError] = []
        snaps: dict = {}  # each frequency's snapshot is stat-ed once per call
        try:
            m = self.manifest()  # the one version this whole call reads
        except StoreError as exc:
            return WindowBatch([], [SymbolError(str(s), exc.code, exc.message) for s in symbols])
        for symbol in symbols:
            try:
                entry = self._entry(symbol, frequency, index, snaps, m)
                ts = entry.ts
                n = len(ts)
                if as_of is None:
                    end = n
                else:
                    if aware:
                        tz = entry.meta.get("timezone")
                        if tz not in tz_cache:
                            tz_cache[tz] = _as_ns(as_of, tz)
                        limit = tz_cache[tz]
                    else:
                        assert naive_as_of is not None  # as_of given, naive: set above
                        limit = naive_as_of
                    end = int(ts.searchsorted(limit, "right"))
                start = max(0, end - lookback)
                if end <= start:
                    when = "" if as_of is None else f" at or before {as_of}"
                    raise NoDataError(symbol, f"{symbol}: no candles{when}")
                windows.append(_window(symbol, entry, start, end))
            except StoreError as exc:
                errors.append(exc.to_error())

        return WindowBatch(windows, errors, 0 if m is None else m.version)


def _window(symbol: str, entry: FileEntry, start: int, end: int) -> SymbolWindow:
    """The rows ``start:end`` of ``entry`` as one symbol's window: one copy, from the
    (6, n) block when the file has one."""
    if entry.block is not None:
        values = np.ascontiguousarray(entry.block[:, start:end].T, dtype=np.float32)  # (L, 6)
    else:
        values = np.empty((end - start, len(FEATURES)), dtype=np.float32)  # (L, 6)
        for j, col in enumerate(entry.cols):
            values[:, j] = col[start:end]
    return SymbolWindow(
        symbol=symbol,
        values=values,
        timestamps=entry.ts[start:end].astype("datetime64[ns]"),  # (L,), a copy
        metadata=entry.meta,
        last_stored=np.datetime64(int(entry.ts[-1]), "ns"),
        held=end,
        template_stamps=_template_stamps(entry, end),
    )


def _template_stamps(entry: FileEntry, end: int) -> np.ndarray | None:
    """The stamps up to row ``end`` the session template learns from, when the metadata names no
    calendar (a view of the file's, datetime64[ns])."""
    stamps = template_history(entry.ts, end, entry.meta)
    return None if stamps is None else np.asarray(stamps).view("datetime64[ns]")
