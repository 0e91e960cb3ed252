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

import json
import logging
import mmap
import os
import re
import secrets
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from kronos_core.candles import FEATURES, CandleError
from kronos_core.errors import ErrorCode

try:  # POSIX advisory locks serialize writers of one symbol; absent on Windows.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

FORMAT_NAME = "kronos-kline"
FORMAT_VERSION = 1
META_KEY = b"kronos"
SUFFIX = ".arrow"
TIME_COLUMN = "timestamps"
COLUMNS: tuple[str, ...] = (TIME_COLUMN, *FEATURES)
SCHEMA_FIELDS = [pa.field(TIME_COLUMN, pa.timestamp("ns"), nullable=False)] + [
    pa.field(c, pa.float64(), nullable=False) for c in FEATURES
]

SYMBOL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FREQUENCY_PATTERN = re.compile(r"^[A-Za-z0-9]{1,16}$")

# the codes a store read can report (``StoreError`` subclasses below); see kronos_core.errors
ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_SYMBOL,
    ErrorCode.UNKNOWN_SYMBOL,
    ErrorCode.AMBIGUOUS_SYMBOL,
    ErrorCode.CORRUPT_FILE,
    ErrorCode.NO_DATA,
)
_NAT = np.iinfo(np.int64).min


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """A per-symbol store failure; ``code`` (set by each subclass) is one of ``ERROR_CODES``."""

    code: ErrorCode

    def __init__(self, symbol: str, message: str):
        super().__init__(message)
        self.symbol = symbol
        self.message = message

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.message

    def to_error(self) -> SymbolError:
        return SymbolError(self.symbol, self.code, self.message)


class InvalidSymbolError(StoreError, ValueError):
    code = ErrorCode.INVALID_SYMBOL


class UnknownSymbolError(StoreError, KeyError):
    code = ErrorCode.UNKNOWN_SYMBOL


class AmbiguousSymbolError(StoreError, LookupError):
    """The symbol is stored at several frequencies and none was chosen."""

    code = ErrorCode.AMBIGUOUS_SYMBOL


class CorruptFileError(StoreError):
    code = ErrorCode.CORRUPT_FILE


class NoDataError(StoreError):
    code = ErrorCode.NO_DATA


@dataclass(frozen=True)
class SymbolError:
    """One symbol's failure in a batch read. ``code``: one of ``ERROR_CODES``."""

    symbol: str
    code: ErrorCode
    message: str


def validate_symbol(symbol: Any) -> str:
    """Return ``symbol`` if it is safe to use as a file name, else raise ``InvalidSymbolError``.

    Allowed: 1-64 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or digit,
    and no ``..``. So no separators, no absolute paths, no empty names, no dot files.
    """
    if not isinstance(symbol, str):
        raise InvalidSymbolError(
            repr(symbol), f"symbol must be a string, got {type(symbol).__name__}"
        )
    if not SYMBOL_PATTERN.fullmatch(symbol) or ".." in symbol:
        raise InvalidSymbolError(
            symbol,
            f"invalid symbol {symbol!r}: use 1-64 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit, without '..'",
        )
    return symbol


def validate_frequency(frequency: Any) -> str:
    if not isinstance(frequency, str) or not FREQUENCY_PATTERN.fullmatch(frequency):
        raise ValueError(
            f"invalid frequency {frequency!r}: use 1-16 letters and digits, e.g. 5min, 1h, 1d"
        )
    return frequency


# --------------------------------------------------------------------------- batch


@dataclass
class WindowBatch:
    """Windows of many symbols, left-padded to a common length ``L``.

    ``values`` (B, L, 6) float32 in ``FEATURES`` order, padding rows are 0;
    ``timestamps`` (B, L) datetime64[ns], padding is NaT; ``lengths`` (B,) the real
    number of candles per symbol (its last ``lengths[i]`` rows). ``symbols`` are
    the symbols that succeeded, in request order; ``errors`` the others.
    """

    symbols: list[str]
    values: np.ndarray
    timestamps: np.ndarray
    lengths: np.ndarray
    errors: list[SymbolError] = field(default_factory=list)
    metadata: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.symbols)

    def series(self, i: int) -> tuple[np.ndarray, pd.DatetimeIndex]:
        """Unpadded ``(values (L_i, 6), DatetimeIndex (L_i,))`` of the i-th symbol (views)."""
        n = int(self.lengths[i])
        L = self.values.shape[1]
        return self.values[i, L - n :], pd.DatetimeIndex(self.timestamps[i, L - n :])


# --------------------------------------------------------------------------- files


class _Entry:
    """One opened file: zero-copy views into its memory map, metadata parsed on demand."""

    __slots__ = ("path", "key", "ts", "_cols", "block", "raw_meta", "frequency", "symbol", "_meta")

    def __init__(self, path, key, ts, cols, raw_meta, frequency, symbol, block=None):
        self.path: str = path
        self.key: tuple[int, int, int] = key  # (inode, size, mtime_ns)
        self.ts: np.ndarray = ts  # int64 ns view into the mapping
        self._cols: list[np.ndarray] | None = cols  # None: the rows of ``block``
        # (6, n) view of the six columns when they lie at equal distances in the
        # mapping (as written by this module): one copy per window instead of six
        self.block: np.ndarray | None = block
        self.raw_meta: bytes | None = raw_meta
        self.frequency = frequency
        self.symbol = symbol
        self._meta: dict | None = None

    @property
    def cols(self) -> list[np.ndarray]:
        """The six float64 column views into the mapping."""
        if self._cols is None:
            self._cols = list(self.block)
        return self._cols

    @property
    def meta(self) -> dict:
        if self._meta is None:
            meta: dict = {}
            if self.raw_meta is not None:
                try:
                    meta = json.loads(self.raw_meta)
                except ValueError as exc:
                    raise CorruptFileError(
                        self.symbol,
                        f"{self.symbol}: metadata in {self.path} is not valid JSON: {exc}",
                    ) from None
                if not isinstance(meta, dict):
                    raise CorruptFileError(
                        self.symbol, f"{self.symbol}: metadata in {self.path} is not a JSON object"
                    )
            meta.setdefault("symbol", self.symbol)
            meta.setdefault("frequency", self.frequency)
            meta.setdefault("timezone", None)
            meta.setdefault("source", None)
            meta["rows"] = int(len(self.ts))
            self._meta = meta
        return self._meta


def _stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _column_view(arr: pa.Array, dtype) -> np.ndarray:
    buf = arr.buffers()[1]
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * itemsize)


_EXPECTED_SCHEMA = pa.schema(SCHEMA_FIELDS)


_RawFileReader = getattr(pa.lib, "_RecordBatchFileReader", None)


def _file_reader(buf: pa.Buffer):
    """``ipc.RecordBatchFileReader(buf)`` without its Python-level option handling
    (half the per-file cost when opening thousands of files); public API fallback."""
    global _RawFileReader
    if _RawFileReader is not None:
        try:
            reader = _RawFileReader.__new__(_RawFileReader)
            reader._open(buf)
            return reader
        except (AttributeError, TypeError):  # private API changed: use the public one
            _RawFileReader = None
    return ipc.RecordBatchFileReader(buf)


def _map(label: str, path: str) -> tuple[mmap.mmap, pa.Buffer]:
    """Memory-map a whole file read-only (the descriptor is closed at once)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
    except ValueError as exc:  # mmap of an empty file
        raise CorruptFileError(label, f"{label}: file {path} is empty ({exc})") from None
    except OSError as exc:
        raise CorruptFileError(label, f"{label}: cannot open {path}: {exc}") from None
    return mm, pa.py_buffer(mm)


def _views(
    label: str, arrays: Sequence[pa.Array], mm: mmap.mmap, buf: pa.Buffer
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
    """Zero-copy ``(ts int64, six float64 columns, (6, n) block or None)`` of the seven
    columns of one record batch (null-free, else ``CorruptFileError``)."""
    n = len(arrays[0])
    addr = []
    for name, arr in zip(COLUMNS, arrays):
        if arr.null_count:
            raise CorruptFileError(
                label, f"{label}: column {name} has {arr.null_count} null value(s)"
            )
        addr.append(arr.buffers()[1].address + arr.offset * 8)
    base = buf.address
    stride = addr[1] - addr[0]
    if (
        n > 0
        and stride >= n * 8
        and stride % 8 == 0
        and (addr[0] - base) % 8 == 0
        and addr[0] >= base
        and addr[-1] + n * 8 <= base + len(mm)
        and all(addr[j + 1] - addr[j] == stride for j in range(len(addr) - 1))
    ):
        # as written by this module: seven equally spaced buffers inside the mapping;
        # views straight on the mmap, and a (6, n) block for one copy per window
        ts = np.ndarray((n,), np.int64, buffer=mm, offset=addr[0] - base)
        block = np.ndarray(
            (6, n), np.float64, buffer=mm, offset=addr[1] - base, strides=(stride, 8)
        )
        return ts, list(block), block
    ts = _column_view(arrays[0], np.int64)
    return ts, [_column_view(a, np.float64) for a in arrays[1:]], None


def _check_schema(label: str, path: str, schema: pa.Schema) -> None:
    if not schema.equals(_EXPECTED_SCHEMA, check_metadata=False):
        raise CorruptFileError(
            label,
            f"{label}: {path} has schema {schema.to_string(show_schema_metadata=False)!r}, "
            f"expected columns {list(COLUMNS)} (timestamp[ns], then double)",
        )


def _not_arrow(label: str, path: str, exc: Exception) -> CorruptFileError:
    return CorruptFileError(
        label, f"{label}: {path} is not a readable Arrow IPC file (corrupt or truncated): {exc}"
    )


def _open_file(symbol: str, path: str, key: tuple[int, int, int], frequency: str) -> _Entry:
    """Memory-map an Arrow IPC file and return zero-copy column views."""
    mm, buf = _map(symbol, path)
    try:
        reader = _file_reader(buf)
        schema = reader.schema
        _check_schema(symbol, path, schema)
        if reader.num_record_batches == 1:
            batch = reader.get_batch(0)
            batch.validate()
            arrays = batch.columns
        else:  # written by another tool: read all (one copy), still valid
            table = reader.read_all().combine_chunks()
            table.validate()
            arrays = [c.chunk(0) if c.num_chunks else pa.array([], c.type) for c in table.columns]
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _not_arrow(symbol, path, exc) from None
    ts, cols, block = _views(symbol, arrays, mm, buf)
    # once per opened file (8 bytes a row; reads then binary-search and slice freely)
    if len(ts) > 1 and not (ts[1:] > ts[:-1]).all():
        raise CorruptFileError(
            symbol, f"{symbol}: timestamps in {path} are not strictly increasing"
        )
    raw = (schema.metadata or {}).get(META_KEY)
    return _Entry(path, key, ts, cols, raw, frequency, symbol, block=block)


# --------------------------------------------------------------------------- snapshot

SNAPSHOT_NAME = "_snapshot.arrow"
SNAPSHOT_META_KEY = b"kronos_snapshot"
SNAPSHOT_FORMAT = "kronos-kline-snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOT_FIELDS = ("symbol", "batch", "offset", "rows", "inode", "size", "mtime_ns", "meta")
SNAPSHOT_BATCH_ROWS = 1 << 22  # rows per record batch (~224 MB): bounds compaction memory


class SnapshotError(Exception):
    """A snapshot that cannot be used; reads fall back to the per-symbol files."""


class _Snapshot:
    """An opened ``_snapshot.arrow``: zero-copy views per record batch, and its index
    (per symbol: record batch, first row, rows, the (inode, size, mtime_ns) of the
    symbol's file when compacted, and its metadata)."""

    __slots__ = (
        "path",
        "key",
        "frequency",
        "batches",
        "pos",
        "spans",
        "keys",
        "metas",
        "_first",
        "_offsets",
        "_unsorted",
    )

    def __init__(self, path, key, frequency, batches, pos, spans, keys, metas, first, offsets):
        self.path: str = path
        self.key: tuple[int, int, int] = key
        self.frequency: str = frequency
        self.batches: list[tuple[np.ndarray, list[np.ndarray], np.ndarray | None]] = batches
        self.pos: dict[str, int] = pos  # symbol -> position in the lists below
        self.spans: list[tuple[int, int, int]] = spans  # (batch, offset, rows)
        self.keys: list[tuple[int, int, int]] = keys
        self.metas: list = metas
        self._first: np.ndarray = first  # position of each batch's first entry (+ the end)
        self._offsets: np.ndarray = offsets  # offset of every entry
        # per batch, the positions of entries whose rows are not strictly increasing;
        # checked on the first use of the batch (one pass instead of one per symbol)
        self._unsorted: list[frozenset | None] = [None] * len(batches)

    def _unsorted_in(self, b: int) -> frozenset:
        bad = self._unsorted[b]
        if bad is None:
            ts = self.batches[b][0]
            lo, hi = int(self._first[b]), int(self._first[b + 1])
            starts = self._offsets[lo:hi]
            drops = np.flatnonzero(ts[1:] <= ts[:-1]) + 1  # rows not after their previous
            seg = np.searchsorted(starts, drops, "right") - 1
            bad = frozenset((seg[starts[seg] != drops] + lo).tolist())
            self._unsorted[b] = bad
        return bad

    def entry(self, symbol: str, path: str, key: tuple[int, int, int]) -> _Entry | None:
        """The symbol's entry when its file is still the one compacted (same inode, size,
        mtime), else None (appended or replaced since: read the file)."""
        k = self.pos.get(symbol)
        if k is None or self.keys[k] != key:
            return None
        b, off, n = self.spans[k]
        meta = self.metas[k]
        if type(meta) is not dict:
            raise SnapshotError(f"metadata of {symbol} is not a JSON object")
        if k in self._unsorted_in(b):  # the per-file check
            raise SnapshotError(f"timestamps of {symbol} are not strictly increasing")
        ts, cols, block = self.batches[b]
        ts = ts[off : off + n]
        if block is not None:
            block = block[:, off : off + n]
            cols = None  # made from the block if ever needed
        else:
            cols = [c[off : off + n] for c in cols]
        entry = _Entry(path, key, ts, cols, None, self.frequency, symbol, block=block)
        entry._meta = meta.copy()
        return entry


def _int_list(values: Any) -> bool:
    return type(values) is list and all(type(v) is int for v in values)


def _open_snapshot(path: str, key: tuple[int, int, int], frequency: str) -> _Snapshot:
    """Map and check a snapshot: footer, schema, nulls, and an index whose entries tile
    every record batch exactly, in order. Raises ``SnapshotError``."""
    label = SNAPSHOT_NAME
    try:
        mm, buf = _map(label, path)
        try:
            reader = _file_reader(buf)
            schema = reader.schema
            _check_schema(label, path, schema)
            batches = []
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batch.validate()
                batches.append(_views(label, batch.columns, mm, buf))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _not_arrow(label, path, exc) from None
    except CorruptFileError as exc:
        raise SnapshotError(exc.message) from None
    raw = (schema.metadata or {}).get(SNAPSHOT_META_KEY)
    try:
        head = json.loads(raw) if raw is not None else None
    except ValueError as exc:
        raise SnapshotError(f"{path}: index is not valid JSON: {exc}") from None
    if type(head) is not dict or head.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"{path}: no {SNAPSHOT_FORMAT} index in the schema metadata")
    if head.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{path}: index version {head.get('version')!r} (this reader: {SNAPSHOT_VERSION})"
        )
    if head.get("frequency") != frequency:
        raise SnapshotError(f"{path}: compacted for frequency {head.get('frequency')!r}")
    index = head.get("index")
    if type(index) is not dict:
        raise SnapshotError(f"{path}: no index")
    cols = [index.get(name) for name in SNAPSHOT_FIELDS]
    symbols, bs, offs, ns, inos, sizes, mtimes, metas = cols
    m = len(symbols) if type(symbols) is list else -1
    if (
        m < 0
        or any(type(c) is not list or len(c) != m for c in cols)
        or not all(_int_list(c) for c in (bs, offs, ns, inos, sizes, mtimes))
        or not all(type(x) is str for x in symbols)
    ):
        raise SnapshotError(f"{path}: malformed index")
    pos = dict(zip(symbols, range(m)))
    if len(pos) != m:
        raise SnapshotError(f"{path}: a symbol appears twice in the index")
    # the entries tile the batches: batch 0, 1, ... in order, rows back to back from 0
    lengths = np.array([len(v[0]) for v in batches], dtype=np.int64)
    b = off = np.zeros(0, dtype=np.int64)
    if m:
        try:
            b, off, n = (np.array(c, dtype=np.int64) for c in (bs, offs, ns))
        except OverflowError:
            raise SnapshotError(f"{path}: index positions out of range") from None
        end = off + n
        new_batch = np.r_[True, b[1:] != b[:-1]]
        last = np.r_[new_batch[1:], True]
        tiled = (
            b[0] == 0
            and b[-1] == len(batches) - 1
            and bool((np.diff(b) >= 0).all() and (np.diff(b) <= 1).all())
            and bool((n >= 0).all())
            and bool((off == np.where(new_batch, 0, np.r_[0, end[:-1]])).all())
            and bool((end[last] == lengths[b[last]]).all())
        )
    else:
        tiled = len(batches) == 0 or not lengths.any()
    if not tiled:
        raise SnapshotError(f"{path}: index does not tile the rows of the record batches")
    return _Snapshot(
        path,
        key,
        frequency,
        batches,
        pos,
        list(zip(bs, offs, ns)),
        list(zip(inos, sizes, mtimes)),
        metas,
        np.searchsorted(b, np.arange(len(batches) + 1)),
        off,
    )


def _write_snapshot(
    path: Path,
    frequency: str,
    items: list[tuple[str, tuple[int, int, int], _Entry, dict]],
    *,
    fsync: bool,
) -> int:
    """Write the snapshot of ``items`` (symbol, file key, opened entry, metadata):
    their rows concatenated in record batches of about ``SNAPSHOT_BATCH_ROWS``, the
    index as JSON in the schema metadata; atomically (temp, fsync, rename). Returns
    the number of rows."""
    groups: list[list[int]] = [[]]
    rows = 0
    index: dict[str, list] = {name: [] for name in SNAPSHOT_FIELDS}
    for i, (symbol, key, entry, meta) in enumerate(items):
        n = len(entry.ts)
        if groups[-1] and rows + n > SNAPSHOT_BATCH_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        for name, value in zip(SNAPSHOT_FIELDS, (symbol, len(groups) - 1, rows, n, *key, meta)):
            index[name].append(value)
        rows += n
    head = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "frequency": frequency,
        "rows": sum(index["rows"]),
        "index": index,
    }
    schema = pa.schema(
        SCHEMA_FIELDS, metadata={SNAPSHOT_META_KEY: json.dumps(head, separators=(",", ":"))}
    )

    def batches():
        for group in groups:
            parts = [items[i][2] for i in group]
            ts = np.concatenate([e.ts for e in parts]) if parts else np.empty(0, np.int64)
            arrays = [pa.array(ts.view("datetime64[ns]"), type=pa.timestamp("ns"))]
            for j in range(len(FEATURES)):
                col = np.concatenate([e.cols[j] for e in parts]) if parts else np.empty(0)
                arrays.append(pa.array(col, type=pa.float64()))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    _write_ipc_atomic(Path(path), schema, batches(), fsync=fsync)
    return head["rows"]


def _as_ns(value: Any, timezone: str | None) -> int:
    """A point in time as int64 ns on the symbol's naive local wall clock."""
    ts = pd.Timestamp(value)
    if ts is pd.NaT:
        raise ValueError(f"as_of {value!r} is not a time")
    if ts.tzinfo is not None:
        ts = ts.tz_convert(timezone or "UTC").tz_localize(None)
    return int(ts.as_unit("ns").value)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_arrow_atomic(path: Path, table: pa.Table, *, fsync: bool = True) -> None:
    """Write ``table`` as an Arrow IPC file at ``path`` atomically.

    The data goes to a temporary file in the same directory, is fsynced, then
    ``os.replace``-d over ``path``: a reader sees the old file or the new one, never
    a partial one. A crash leaves at most a ``.*.tmp`` file, which readers ignore.
    """
    _write_ipc_atomic(Path(path), table.schema, table.to_batches(max_chunksize=None), fsync=fsync)


def _write_ipc_atomic(
    path: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch], *, fsync: bool
) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink:
            with ipc.new_file(sink, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        _fsync_dir(path.parent)


class _SymbolLock:
    """Exclusive advisory lock on ``<dir>/.<symbol>.lock`` while one writer updates a symbol."""

    def __init__(self, directory: Path, symbol: str):
        self.path = directory / f".{symbol}.lock"
        self.fd: int | None = None

    def __enter__(self):
        if fcntl is not None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _frame_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(timestamps int64 ns naive, values (n, 6) float64, tz name or None) of a candle frame."""
    if TIME_COLUMN in frame.columns:
        ts = pd.DatetimeIndex(frame[TIME_COLUMN])
    elif isinstance(frame.index, pd.DatetimeIndex):
        ts = frame.index
    else:
        raise CandleError(
            f"candles need a '{TIME_COLUMN}' column or a DatetimeIndex; columns: {list(frame.columns)}"
        )
    tz = None
    if ts.tz is not None:
        tz = str(ts.tz)
        ts = ts.tz_localize(None)
    missing = [c for c in FEATURES if c not in frame.columns]
    if missing:
        raise CandleError(
            f"columns {missing} missing (fill volume/amount with candles.fill_volume_amount first)"
        )
    values = frame[list(FEATURES)].to_numpy(dtype=np.float64)
    return ts.as_unit("ns").asi8.copy(), values, tz


# --------------------------------------------------------------------------- store


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
        self._cache: dict[tuple[str, str | None], _Entry] = {}
        self._snapshots: dict[str, tuple[tuple[int, int, int], _Snapshot | None]] = {}
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

    def _snapshot(self, frequency: str, memo: dict | None = None) -> _Snapshot | None:
        """The frequency directory's snapshot, re-opened when its file changed (checked
        once per ``memo``, i.e. per batch read); None if absent or unusable."""
        if memo is not None and frequency in memo:
            return memo[frequency]
        path = os.path.join(self.root, frequency, SNAPSHOT_NAME)
        snap = None
        try:
            key = _stat_key(os.stat(path))
        except OSError:
            key = None
        if key is not None:
            cached = self._snapshots.get(frequency)
            if cached is not None and cached[0] == key:
                snap = cached[1]
            else:
                try:
                    snap = _open_snapshot(path, key, frequency)
                except Exception as exc:  # a bad snapshot costs speed, never a read
                    log.warning("ignoring snapshot %s, reading per-symbol files: %s", path, exc)
                with self._lock:
                    self._snapshots[frequency] = (key, snap)
        if memo is not None:
            memo[frequency] = snap
        return snap

    def _entry(self, symbol: str, frequency: str | None, index=None, snaps=None) -> _Entry:
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
        key = _stat_key(st)
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
            entry = _open_file(symbol, path, key, freq)
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
        """The last ``lookback`` candles at or before ``as_of`` of each symbol, as one batch.

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

        ok: list[tuple[str, _Entry, int, int]] = []
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
                meta = (
                    entry.meta
                )  # parsed once per opened file; a bad header is this symbol's error
                ok.append((symbol, entry, start, end, meta))
            except StoreError as exc:
                errors.append(exc.to_error())

        B = len(ok)
        L = max((e - s for _, _, s, e, _ in ok), default=0)
        values = np.zeros((B, L, len(FEATURES)), dtype=np.float32)
        stamps = np.empty((B, L), dtype=np.int64)
        lengths = np.empty(B, dtype=np.int64)
        metas = []
        for i, (_, entry, s, e, meta) in enumerate(ok):
            n = e - s
            lengths[i] = n
            if n < L:
                stamps[i, : L - n] = _NAT
            stamps[i, L - n :] = entry.ts[s:e]
            if entry.block is not None:
                values[i, L - n :] = entry.block[:, s:e].T
            else:
                block = values[i, L - n :]
                for j, col in enumerate(entry.cols):
                    block[:, j] = col[s:e]
            metas.append(meta)
        return WindowBatch(
            symbols=[item[0] for item in ok],
            values=values,
            timestamps=stamps.view("datetime64[ns]"),
            lengths=lengths,
            errors=errors,
            metadata=metas,
        )

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
            with _SymbolLock(directory, "_snapshot"):  # one compaction at a time
                for symbol in self.symbols(freq):
                    file = str(directory / (symbol + SUFFIX))
                    try:
                        # stat first: if the file is replaced before it is opened, the
                        # entry is keyed by the old file and is never used
                        key = _stat_key(os.stat(file))
                        entry = _open_file(symbol, file, key, freq)
                        items.append((symbol, key, entry, entry.meta))
                    except FileNotFoundError:
                        continue
                    except StoreError as exc:
                        log.warning("compact: leaving out %s", exc)
                        skipped.append(exc.to_error())
                count = len(items)
                if items:
                    rows = _write_snapshot(path, freq, items, fsync=fsync)
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
        ts_new, val_new, frame_tz = _frame_arrays(frame)
        if frame_tz is not None:
            tz = timezone or frame_tz
            if timezone and timezone != frame_tz:  # wall clock of the requested zone
                idx = pd.DatetimeIndex(ts_new).tz_localize(frame_tz).tz_convert(timezone)
                ts_new = idx.tz_localize(None).as_unit("ns").asi8.copy()
            timezone = tz
        if len(ts_new) == 0:
            raise CandleError(f"{symbol}: no candles to write")
        if not np.isfinite(val_new).all():
            raise CandleError(f"{symbol}: candles contain NaN or infinite values")
        if len(ts_new) > 1 and not (ts_new[1:] > ts_new[:-1]).all():
            raise CandleError(
                f"{symbol}: timestamps must be sorted and unique (validate before writing)"
            )

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
        path = directory / (symbol + SUFFIX)

        with _SymbolLock(directory, symbol):
            meta: dict = {}
            if path.exists() and not overwrite:
                st = path.stat()
                old = _open_file(symbol, str(path), _stat_key(st), frequency)
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
            meta.update(
                format=FORMAT_NAME,
                version=FORMAT_VERSION,
                symbol=symbol,
                frequency=frequency,
                timezone=timezone,
                source=source if source is not None else meta.get("source"),
                rows=int(len(ts)),
                first=str(pd.Timestamp(int(ts[0]))),
                last=str(pd.Timestamp(int(ts[-1]))),
            )
            table = _to_table(ts, values, meta)
            write_arrow_atomic(path, table, fsync=fsync)
        return meta


def _to_table(ts: np.ndarray, values: np.ndarray, meta: dict) -> pa.Table:
    schema = pa.schema(
        SCHEMA_FIELDS, metadata={META_KEY: json.dumps(meta, sort_keys=True).encode()}
    )
    arrays = [pa.array(np.ascontiguousarray(ts).view("datetime64[ns]"), type=pa.timestamp("ns"))]
    arrays += [
        pa.array(np.ascontiguousarray(values[:, j], dtype=np.float64))
        for j in range(values.shape[1])
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


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
