"""The store's file format: one Arrow IPC file per symbol, opened as zero-copy views.

Each file holds one record batch with the columns ``timestamps`` (``timestamp[ns]``, naive
local exchange wall clock), ``open, high, low, close, volume, amount`` (``float64``), sorted
by unique timestamps; the symbol's metadata is JSON under the schema metadata key ``kronos``.
``to_table`` builds such a file's table, ``write_arrow_atomic`` writes one atomically,
``open_file`` memory-maps one and checks it. Writers of one symbol hold ``SymbolLock``.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from kronos_core.base.atomic import replace_atomically
from kronos_core.base.candles import FEATURES, CandleError
from kronos_core.data.errors import CorruptFileError

try:  # POSIX advisory locks serialize writers of one symbol; absent on Windows.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

FORMAT_NAME = "kronos-kline"
FORMAT_VERSION = 1
META_KEY = b"kronos"
SUFFIX = ".arrow"
TIME_COLUMN = "timestamps"
COLUMNS: tuple[str, ...] = (TIME_COLUMN, *FEATURES)
SCHEMA_FIELDS = [pa.field(TIME_COLUMN, pa.timestamp("ns"), nullable=False)] + [
    pa.field(c, pa.float64(), nullable=False) for c in FEATURES
]



class FileEntry:
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
            assert self.block is not None  # no column views: the file has its block
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


def stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def column_view(arr: pa.Array, dtype) -> np.ndarray:
    buf = arr.buffers()[1]
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * itemsize)


_EXPECTED_SCHEMA = pa.schema(SCHEMA_FIELDS)


_RawFileReader = getattr(pa.lib, "_RecordBatchFileReader", None)


def file_reader(buf: pa.Buffer):
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


def map_file(label: str, path: str) -> tuple[mmap.mmap, pa.Buffer]:
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


def column_views(
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
    ts = column_view(arrays[0], np.int64)
    return ts, [column_view(a, np.float64) for a in arrays[1:]], None


def check_schema(label: str, path: str, schema: pa.Schema) -> None:
    if not schema.equals(_EXPECTED_SCHEMA, check_metadata=False):
        raise CorruptFileError(
            label,
            f"{label}: {path} has schema {schema.to_string(show_schema_metadata=False)!r}, "
            f"expected columns {list(COLUMNS)} (timestamp[ns], then double)",
        )


def not_arrow_error(label: str, path: str, exc: Exception) -> CorruptFileError:
    return CorruptFileError(
        label, f"{label}: {path} is not a readable Arrow IPC file (corrupt or truncated): {exc}"
    )


def open_file(symbol: str, path: str, key: tuple[int, int, int], frequency: str) -> FileEntry:
    """Memory-map an Arrow IPC file and return zero-copy column views."""
    mm, buf = map_file(symbol, path)
    try:
        reader = file_reader(buf)
        schema = reader.schema
        check_schema(symbol, path, schema)
        if reader.num_record_batches == 1:
            batch = reader.get_batch(0)
            batch.validate()
            arrays = batch.columns
        else:  # written by another tool: read all (one copy), still valid
            table = reader.read_all().combine_chunks()
            table.validate()
            arrays = [c.chunk(0) if c.num_chunks else pa.array([], c.type) for c in table.columns]
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise not_arrow_error(symbol, path, exc) from None
    ts, cols, block = column_views(symbol, arrays, mm, buf)
    # once per opened file (8 bytes a row; reads then binary-search and slice freely)
    if len(ts) > 1 and not (ts[1:] > ts[:-1]).all():
        raise CorruptFileError(
            symbol, f"{symbol}: timestamps in {path} are not strictly increasing"
        )
    raw = (schema.metadata or {}).get(META_KEY)
    return FileEntry(path, key, ts, cols, raw, frequency, symbol, block=block)



def write_arrow_atomic(path: Path, table: pa.Table, *, fsync: bool = True) -> None:
    """Write ``table`` as an Arrow IPC file at ``path`` atomically.

    The data goes to a temporary file in the same directory, is fsynced, then
    ``os.replace``-d over ``path``: a reader sees the old file or the new one, never
    a partial one. A crash leaves at most a ``.*.tmp`` file, which readers ignore.
    """
    write_ipc_atomic(Path(path), table.schema, table.to_batches(max_chunksize=None), fsync=fsync)


def write_arrow_new(path: Path, table: pa.Table) -> None:
    """Write ``table`` as an Arrow IPC file at ``path``, which must not exist, in place (no
    temporary file, no rename): for files no reader can see until something names them, such
    as a transaction's generation files (a kill leaves a partial file of a generation that was
    never published, which the next transaction removes). Not synced."""
    sink = pa.BufferOutputStream()  # in memory first: one write call, not one per buffer
    with ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=None):
            writer.write_batch(batch)
    with open(path, "xb") as out:  # FileExistsError if it exists (one open: a create is dear)
        out.write(sink.getvalue())


def write_ipc_atomic(
    path: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch], *, fsync: bool
) -> None:
    """The record ``batches`` as an Arrow IPC file at ``path``, atomically
    (``kronos_core.base.atomic``)."""

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink:
            with ipc.new_file(sink, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)

    replace_atomically(path, write, fsync=fsync)


class SymbolLock:
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


def frame_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(timestamps int64 ns naive, values (n, 6) float64, tz name or None) of a candle frame."""
    if TIME_COLUMN in frame.columns:
        ts = pd.DatetimeIndex(frame[TIME_COLUMN])
    elif isinstance(frame.index, pd.DatetimeIndex):
        ts = frame.index
    else:
        raise CandleError(
            f"candles need a '{TIME_COLUMN}' column or a DatetimeIndex; columns: "
            f"{list(frame.columns)}"
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



def to_table(ts: np.ndarray, values: np.ndarray, meta: dict) -> pa.Table:
    """The Arrow table of one symbol's file: int64-ns ``ts`` (n,), ``values`` (n, 6) in
    ``FEATURES`` order, ``meta`` as JSON under ``META_KEY``."""
    schema = pa.schema(
        SCHEMA_FIELDS, metadata={META_KEY: json.dumps(meta, sort_keys=True).encode()}
    )
    arrays = [pa.array(np.ascontiguousarray(ts).view("datetime64[ns]"), type=pa.timestamp("ns"))]
    arrays += [
        pa.array(np.ascontiguousarray(values[:, j], dtype=np.float64))
        for j in range(values.shape[1])
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def symbol_file(directory: Path, symbol: str) -> Path:
    """The file of ``symbol`` in a frequency directory (``<directory>/<symbol>.arrow``)."""
    return Path(directory) / (symbol + SUFFIX)


def file_metadata(
    meta: dict, *, symbol: str, frequency: str, timezone: str | None, source: str | None,
    ts: np.ndarray,
) -> dict:
    """``meta`` (extra keys kept) with the keys every file carries: format, version,
    symbol, frequency, timezone, source, and rows, first and last of ``ts`` (int64 ns)."""
    return {
        **meta,
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "symbol": symbol,
        "frequency": frequency,
        "timezone": timezone,
        "source": source,
        "rows": int(len(ts)),
        "first": str(pd.Timestamp(int(ts[0]))),
        "last": str(pd.Timestamp(int(ts[-1]))),
    }

