"""The per-frequency read snapshot: every symbol's rows in one Arrow IPC file plus an index.

``KlineStore.compact()`` writes ``ROOT/<frequency>/_snapshot.arrow`` (``write_snapshot``):
the rows of all symbols concatenated in record batches, and per symbol its record batch,
first row, rows, the inode, size and mtime of its file at compaction, and its metadata, as
JSON in the schema metadata. ``open_snapshot`` maps and checks one; ``Snapshot.entry`` gives
a symbol's views when its file is unchanged since. Unusable snapshots raise
``SnapshotError``, which the store logs and ignores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kronos_core.base.candles import FEATURES
from kronos_core.data.errors import CorruptFileError
from kronos_core.data.fileformat import (
    SCHEMA_FIELDS,
    FileEntry,
    check_schema,
    column_views,
    file_reader,
    map_file,
    not_arrow_error,
    write_ipc_atomic,
)

SNAPSHOT_NAME = "_snapshot.arrow"
SNAPSHOT_META_KEY = b"kronos_snapshot"
SNAPSHOT_FORMAT = "kronos-kline-snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOT_FIELDS = ("symbol", "batch", "offset", "rows", "inode", "size", "mtime_ns", "meta")
SNAPSHOT_BATCH_ROWS = 1 << 22  # rows per record batch (~224 MB): bounds compaction memory


class SnapshotError(Exception):
    """A snapshot that cannot be used; reads fall back to the per-symbol files."""


class Snapshot:
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

    def entry(self, symbol: str, path: str, key: tuple[int, int, int]) -> FileEntry | None:
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
        cols: list[np.ndarray] | None
        ts, cols, block = self.batches[b]
        ts = ts[off : off + n]
        if block is not None:
            block = block[:, off : off + n]
            cols = None  # made from the block if ever needed
        else:
            cols = [c[off : off + n] for c in cols]
        entry = FileEntry(path, key, ts, cols, None, self.frequency, symbol, block=block)
        entry._meta = meta.copy()
        return entry


def _int_list(values: Any) -> bool:
    return type(values) is list and all(type(v) is int for v in values)


def _check_tiling(path: str, batches: list, bs: list, offs: list, ns: list, m: int):
    """``(batch, offset)`` arrays of the ``m`` index entries, checked to tile the record
    batches: batch 0, 1, ... in order, rows back to back from 0. Raises ``SnapshotError``."""
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
    return b, off


def open_snapshot(path: str, key: tuple[int, int, int], frequency: str) -> Snapshot:
    """Map and check a snapshot: footer, schema, nulls, and an index whose entries tile
    every record batch exactly, in order. Raises ``SnapshotError``."""
    label = SNAPSHOT_NAME
    try:
        mm, buf = map_file(label, path)
        try:
            reader = file_reader(buf)
            schema = reader.schema
            check_schema(label, path, schema)
            batches = []
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batch.validate()
                batches.append(column_views(label, batch.columns, mm, buf))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise not_arrow_error(label, path, exc) from None
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
    cols: list[Any] = [index.get(name) for name in SNAPSHOT_FIELDS]  # JSON values, checked below
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
    b, off = _check_tiling(path, batches, bs, offs, ns, m)
    return Snapshot(
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


def write_snapshot(
    path: Path,
    frequency: str,
    items: list[tuple[str, tuple[int, int, int], FileEntry, dict]],
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

    write_ipc_atomic(Path(path), schema, batches(), fsync=fsync)
    return head["rows"]


