"""Arrow K-line store: one Arrow IPC file per symbol and frequency, memory-mapped reads.

Layout (see ``docs/store.md``)::

    ROOT/<frequency>/<symbol>.arrow

Each file holds one record batch with the columns ``timestamps`` (``timestamp[ns]``,
naive local exchange wall clock), ``open, high, low, close, volume, amount``
(``float64``), sorted by unique timestamps. The symbol's metadata (frequency,
time zone, source, ...) is JSON under the schema metadata key ``kronos``.

Reads memory-map the file and slice the tail of each column without copying the
file; only the requested window is copied into the output batch. Opened files are
cached per ``KlineStore`` instance and re-opened when a file's inode, size or
mtime changes (every write replaces the file atomically, so a new inode).

Read snapshot: ``KlineStore.compact()`` writes ``ROOT/<frequency>/_snapshot.arrow``,
every symbol's rows concatenated in one Arrow IPC file with an index (per symbol:
record batch, first row, rows, and the inode, size and mtime of its file at
compaction) as JSON in the schema metadata. A fresh ``KlineStore`` then opens one
mapping per frequency instead of one per symbol: a symbol whose file still has the
indexed inode, size and mtime is sliced from the snapshot; any other (appended,
replaced, new) is read from its own file, which stays the source of truth. An
unusable snapshot is logged and ignored, never a read error.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kronos_core.candles import FEATURES, CandleError
from kronos_core.data.errors import (  # noqa: F401  (re-exported: callers import them from here)
    ERROR_CODES,
    FREQUENCY_PATTERN,
    SYMBOL_PATTERN,
    AmbiguousSymbolError,
    CorruptFileError,
    InvalidSymbolError,
    NoDataError,
    StoreError,
    SymbolError,
    UnknownSymbolError,
    validate_frequency,
    validate_symbol,
)
from kronos_core.data.fileformat import (  # noqa: F401  (re-exported)
    COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    META_KEY,
    SCHEMA_FIELDS,
    SUFFIX,
    TIME_COLUMN,
    FileEntry,
    SymbolLock,
    file_metadata,
    frame_arrays,
    open_file,
    stat_key,
    symbol_file,
    to_table,
    write_arrow_atomic,
)
from kronos_core.data.snapshot import (  # noqa: F401  (re-exported)
    SNAPSHOT_NAME,
    Snapshot,
    SnapshotError,
    open_snapshot,
    write_snapshot,
)

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class SymbolWindow:
    """One symbol's window of a batch read, unpadded.

    ``values`` (L, 6) float32 in ``FEATURES`` order; ``timestamps`` (L,)
    datetime64[ns], naive local wall clock; ``metadata`` the symbol's metadata
    (frequency, timezone, session_timezone, exchange, ...); ``last_stored`` the
    symbol's last stored candle, which is after ``timestamps[-1]`` when ``as_of``
    cut the window.
    """

    symbol: str
    values: np.ndarray
    timestamps: np.ndarray
    metadata: dict
    last_stored: np.datetime64


@dataclass
class WindowBatch:
    """A batch read: ``windows`` of the symbols that succeeded, in request order, and
    ``errors`` of the others."""

    windows: list[SymbolWindow] = field(default_factory=list)
    errors: list[SymbolError] = field(default_factory=list)

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


class KlineStore:
    """A directory of Arrow K-line files; see the module docstring for the layout.

    ``frequency``: the default frequency sub-directory for reads and writes. When it
    is None a read finds the symbol in whichever frequency directory holds it (an
    error if several do and none is chosen).

    ``snapshot``: open files from the frequency directory's ``_snapshot.arrow`` (see
    ``compact``) when they are unchanged since it was written (the default); False
    always maps the per-symbol files. ``opened`` counts how files were opened:
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
        self.root = Path(root)
        self._prefix = str(self.root) + os.sep  # paths built by string, once validated
        self.frequency = validate_frequency(frequency) if frequency is not None else None
        self.cache_size = int(cache_size)
        self.use_snapshot = bool(snapshot)
        self.opened = {"snapshot": 0, "file": 0}
        self._cache: dict[tuple[str, str | None], FileEntry] = {}
        self._snapshots: dict[str, tuple[tuple[int, int, int], Snapshot | None]] = {}
        self._lock = threading.Lock()
        self._freq_dirs: tuple[int, list[str]] | None = None

    def __repr__(self) -> str:
        return f"KlineStore({str(self.root)!r}, frequency={self.frequency!r})"

    # -- listing ---------------------------------------------------------------

    def frequencies(self) -> list[str]:
        """Sorted frequency sub-directories present in the store."""
        try:
            mtime = self.root.stat().st_mtime_ns
        except FileNotFoundError:
            return []
        cached = self._freq_dirs
        if cached is not None and cached[0] == mtime:
            return cached[1]
        freqs = sorted(
            e.name
            for e in os.scandir(self.root)
            if e.is_dir() and FREQUENCY_PATTERN.fullmatch(e.name)
        )
        self._freq_dirs = (mtime, freqs)
        return freqs

    def symbols(self, frequency: str | None = None) -> list[str]:
        """Sorted symbols in the store (in one frequency, or in all)."""
        frequency = frequency or self.frequency
        freqs = [validate_frequency(frequency)] if frequency else self.frequencies()
        out: set[str] = set()
        for f in freqs:
            d = self.root / f
            if not d.is_dir():
                continue
            for e in os.scandir(d):
                name = e.name
                if name.endswith(SUFFIX):
                    stem = name[: -len(SUFFIX)]
                    if SYMBOL_PATTERN.fullmatch(stem) and ".." not in stem:
                        out.add(stem)
        return sorted(out)

    def path(self, symbol: str, frequency: str) -> Path:
        """The file of ``symbol`` at ``frequency`` (both validated; the file may not exist)."""
        return self.root / validate_frequency(frequency) / (validate_symbol(symbol) + SUFFIX)

    # -- opening -----------------------------------------------------------------

    def _symbol_index(self) -> dict[str, list[str]]:
        """symbol -> frequencies holding it, from one listing of each frequency directory."""
        index: dict[str, list[str]] = {}
        for f in self.frequencies():
            try:
                entries = os.scandir(self.root / f)
            except FileNotFoundError:
                continue
            with entries:
                for e in entries:
                    if e.name.endswith(SUFFIX) and e.name[0] not in "._":
                        index.setdefault(e.name[: -len(SUFFIX)], []).append(f)
        return index

    def _locate(
        self, symbol: str, frequency: str | None, index: dict[str, list[str]] | None = None
    ) -> tuple[str, str, os.stat_result]:
        if frequency is not None:
            p = f"{self._prefix}{frequency}{os.sep}{symbol}{SUFFIX}"
            try:
                return p, frequency, os.stat(p)
            except FileNotFoundError:
                raise UnknownSymbolError(
                    symbol,
                    f"unknown symbol {symbol!r} at frequency {frequency!r} in store {self.root}",
                ) from None
        found = []
        for f in self.frequencies() if index is None else index.get(symbol, ()):
            p = f"{self._prefix}{f}{os.sep}{symbol}{SUFFIX}"
            try:
                found.append((p, f, os.stat(p)))
            except FileNotFoundError:
                continue
        if not found:
            raise UnknownSymbolError(symbol, f"unknown symbol {symbol!r} in store {self.root}")
        if len(found) > 1:
            raise AmbiguousSymbolError(
                symbol,
                f"symbol {symbol!r} is stored at several frequencies {[f for _, f, _ in found]}; "
                "choose one with frequency=",
            )
        return found[0]

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

    def _entry(self, symbol: str, frequency: str | None, index=None, snaps=None) -> FileEntry:
        # only validated symbols are ever cached, so a hit needs no new check
        entry = self._cache.get((symbol, frequency)) if type(symbol) is str else None
        if entry is not None:
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
        path, freq, st = self._locate(symbol, frequency, index)
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

    def read(self, symbol: str, frequency: str | None = None, start=None, end=None) -> pd.DataFrame:
        """All candles of ``symbol`` (optionally ``start <= t <= end``) as a DataFrame (a copy)."""
        entry = self._entry(symbol, frequency or self.frequency)
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
            if frequency is not None or len(symbols) < 16:
                return None
            if not listing:
                listing.append(self._symbol_index())
            return listing[0]

        windows: list[SymbolWindow] = []
        errors: list[SymbolError] = []
        snaps: dict = {}  # each frequency's snapshot is stat-ed once per call
        for symbol in symbols:
            try:
                entry = self._entry(symbol, frequency, index, snaps)
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
                        limit = naive_as_of
                    end = int(ts.searchsorted(limit, "right"))
                start = max(0, end - lookback)
                if end <= start:
                    when = "" if as_of is None else f" at or before {as_of}"
                    raise NoDataError(symbol, f"{symbol}: no candles{when}")
                windows.append(_window(symbol, entry, start, end))
            except StoreError as exc:
                errors.append(exc.to_error())

        return WindowBatch(windows, errors)

    # -- writing -----------------------------------------------------------------

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
        freqs = [validate_frequency(frequency)] if frequency else self.frequencies()
        report: dict[str, dict] = {}
        for freq in freqs:
            directory = self.root / freq
            if not directory.is_dir():
                continue
            path = directory / SNAPSHOT_NAME
            items = []
            skipped: list[SymbolError] = []
            with SymbolLock(directory, "_snapshot"):  # one compaction at a time
                for symbol in self.symbols(freq):
                    file = str(symbol_file(directory, symbol))
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
            report[freq] = {
                "symbols": count,
                "rows": rows,
                "skipped": skipped,
                "path": str(path),
            }
        return report

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
        re-checked for order, duplicates and NaN. Stored history is kept: the new
        candles are merged in by timestamp. Where a timestamp is both stored and new
        with different values, ``on_overlap`` decides: ``"error"`` (raise
        ``CandleError``), ``"keep"`` (keep stored) or ``"replace"`` (take new).
        Identical overlapping candles are simply not duplicated. ``overwrite=True``
        replaces the whole history.
        """
        from kronos_core.data.timestamps import infer_frequency

        validate_symbol(symbol)
        if on_overlap not in ("error", "keep", "replace"):
            raise ValueError(f"on_overlap must be 'error', 'keep' or 'replace', got {on_overlap!r}")
        ts_new, val_new, timezone = _new_candles(symbol, frame, timezone)

        frequency = frequency or self.frequency
        existing_freq = None
        if frequency is None:
            try:
                _, existing_freq, _ = self._locate(symbol, None)
            except UnknownSymbolError:  # a new symbol (AmbiguousSymbolError propagates)
                pass
            frequency = existing_freq or (infer_frequency(ts_new) if len(ts_new) > 1 else None)
            if frequency is None:
                raise CandleError(
                    f"{symbol}: cannot infer the frequency of one candle; pass frequency="
                )
        validate_frequency(frequency)
        directory = self.root / frequency
        directory.mkdir(parents=True, exist_ok=True)
        path = symbol_file(directory, symbol)

        with SymbolLock(directory, symbol):
            meta: dict = {}
            if path.exists() and not overwrite:
                st = path.stat()
                old = open_file(symbol, str(path), stat_key(st), frequency)
                meta = {k: v for k, v in old.meta.items() if k not in ("rows", "first", "last")}
                old_tz = meta.get("timezone")
                if timezone and old_tz and timezone != old_tz:
                    raise CandleError(
                        f"{symbol}: stored time zone is {old_tz!r}, new candles are {timezone!r}"
                    )
                timezone = timezone or old_tz
                ts, values, report = _merge(
                    symbol, old.ts, np.stack(old.cols, axis=1), ts_new, val_new, on_overlap
                )
                del old
                log.info("%s: %s", symbol, report)
            else:
                ts, values = ts_new, val_new
            meta.update(extra_metadata or {})
            meta = file_metadata(
                meta, symbol=symbol, frequency=frequency, timezone=timezone,
                source=source if source is not None else meta.get("source"), ts=ts,
            )
            table = to_table(ts, values, meta)
            write_arrow_atomic(path, table, fsync=fsync)
        return meta


def _new_candles(symbol: str, frame: pd.DataFrame, timezone: str | None):
    """``(ts int64 ns, values (n, 6), timezone)`` of candles to write, re-checked (rows,
    finite, sorted and unique); tz-aware stamps go to ``timezone``'s wall clock (or their
    own zone's)."""
    ts_new, val_new, frame_tz = frame_arrays(frame)
    if frame_tz is not None:
        if timezone and timezone != frame_tz:  # wall clock of the requested zone
            idx = pd.DatetimeIndex(ts_new).tz_localize(frame_tz).tz_convert(timezone)
            ts_new = idx.tz_localize(None).as_unit("ns").asi8.copy()
        timezone = timezone or frame_tz
    if len(ts_new) == 0:
        raise CandleError(f"{symbol}: no candles to write")
    if not np.isfinite(val_new).all():
        raise CandleError(f"{symbol}: candles contain NaN or infinite values")
    if len(ts_new) > 1 and not (ts_new[1:] > ts_new[:-1]).all():
        raise CandleError(f"{symbol}: timestamps must be sorted and unique (validate before writing)")
    return ts_new, val_new, timezone


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
    )


def _merge(
    symbol, ts_old, val_old, ts_new, val_new, on_overlap
) -> tuple[np.ndarray, np.ndarray, str]:
    all_ts = np.concatenate([ts_old, ts_new])
    all_val = np.concatenate([val_old, val_new])
    src = np.concatenate([np.zeros(len(ts_old), np.int8), np.ones(len(ts_new), np.int8)])
    order = np.lexsort((src, all_ts))  # by time, stored before new on ties
    all_ts, all_val, src = all_ts[order], all_val[order], src[order]
    dup = np.flatnonzero(all_ts[1:] == all_ts[:-1])  # pairs (dup, dup + 1): stored, new
    same = (all_val[dup] == all_val[dup + 1]).all(axis=1)
    conflicts = dup[~same]
    if len(conflicts) and on_overlap == "error":
        first = ", ".join(str(pd.Timestamp(int(all_ts[i]))) for i in conflicts[:5])
        raise CandleError(
            f"{symbol}: {len(conflicts)} new candle(s) overlap stored candles with different values "
            f"(first at {first}); choose on_overlap='keep' or 'replace' (--on-overlap)"
        )
    drop = np.zeros(len(all_ts), bool)
    drop[dup[same] + 1] = True  # identical: keep one
    if on_overlap == "replace":
        drop[conflicts] = True
    else:
        drop[conflicts + 1] = True
    keep = ~drop
    added = int((src[keep] == 1).sum())
    report = (
        f"{len(ts_old)} stored + {len(ts_new)} new -> {int(keep.sum())} candles "
        f"({added} added, {int(same.sum())} identical overlaps, {len(conflicts)} conflicts '{on_overlap}')"
    )
    return all_ts[keep], all_val[keep], report
