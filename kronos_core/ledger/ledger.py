"""The forecast ledger: an append-only folder of Parquet files, one per recorded request.

Layout (``docs/ledger.md``)::

    ROOT/date=YYYY-MM-DD/<writer_id>-<UTC time>-<uuid>.parquet    forecasts (by request date)
    ROOT/scores/date=YYYY-MM-DD/<writer_id>-<UTC time>-<uuid>.parquet  scores (by scoring date)

Each ``record`` call writes one new file: to a hidden temporary file in the partition,
fsynced, then renamed into place (and the folder fsynced). A reader sees a whole file or
none; a crash mid-write leaves at most a ``.*.tmp`` file, which readers ignore and
``enforce_retention`` removes once stale. Files are never rewritten, so several writers
(gateways, nodes on a shared path) never collide: each names its files with its own
``writer_id`` and a UUID.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kronos_core.base.atomic import replace_atomically
from kronos_core.ledger.errors import LedgerError, LedgerWriteError
from kronos_core.ledger.records import (
    DEFAULT_FEATURES,
    ForecastRecord,
    empty_scores,
    to_table,
    utc_ns,
)

log = logging.getLogger(__name__)

SCORES_DIR = "scores"
PARTITION = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
WRITER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SUFFIX = ".parquet"
STALE_TMP_S = 3600.0  # a temporary file older than this is a crashed write
NS_PER_DAY = 86_400 * 10**9


def default_ledger_dir(store_dir: str | os.PathLike) -> Path:
    """The ledger of a store when none is named: ``<store>/_ledger`` (inside the store's
    folder, where the store's listing never looks: a frequency folder has no ``_``)."""
    return Path(store_dir) / "_ledger"


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    """``table`` as Parquet at ``path``, atomically (``kronos_core.base.atomic``: temporary file,
    fsync, rename, folder fsync). Raises ``LedgerWriteError`` for any OS error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    except OSError as exc:
        raise LedgerWriteError(
            f"cannot write ledger file {path}: {exc.strerror or exc}", exc.errno
        ) from exc


def _partition_of(t_ns: int) -> str:
    return "date=" + datetime.fromtimestamp(t_ns / 1e9, timezone.utc).strftime("%Y-%m-%d")


def _file_name(writer_id: str, now: datetime) -> str:
    return f"{writer_id}-{now.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex}{SUFFIX}"


def partition_files(root: Path, since_day: date | None = None) -> list[Path]:
    """The Parquet files of ``root``'s ``date=`` partitions (from ``since_day`` on), oldest
    partition first, temporary files left out."""
    out: list[Path] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return out
    for e in entries:
        m = PARTITION.match(e.name)
        if not m or not e.is_dir():
            continue
        if since_day is not None and date.fromisoformat(m.group(1)) < since_day:
            continue
        out.extend(sorted(Path(e.path) / f.name for f in os.scandir(e.path)
                          if f.name.endswith(SUFFIX) and not f.name.startswith(".")))
    return out


def read_files(files: Iterable[Path], skipped: list[tuple[Path, str]] | None = None,
               columns: Sequence[str] | None = None, file_index: bool = False) -> pa.Table | None:
    """The files' rows as one table (columns unified; missing ones are null), None if no file
    could be read. A file that cannot be read is skipped with a warning naming it.
    ``columns``: only these; ``file_index``: add ``_file``, the position of each row's file in
    ``files``."""
    tables = []
    for k, f in enumerate(files):
        try:
            t = pq.read_table(f, columns=list(columns) if columns is not None else None)
            if file_index:
                t = t.append_column(
                    "_file", pa.array(np.full(t.num_rows, k, dtype="i4"), pa.int32())
                )
            tables.append(t)
        except FileNotFoundError:  # removed by retention meanwhile
            continue
        except Exception as exc:  # a corrupt file costs its rows, never the read
            log.warning("skipping unreadable ledger file %s: %s", f, exc)
            if skipped is not None:
                skipped.append((f, str(exc)))
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def _since_day(since: Any) -> tuple[date | None, int | None]:
    if since is None:
        return None, None
    ns = utc_ns(since)
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).date(), ns


# scores/complete/date=YYYY-MM-DD.txt: forecast files every step of which is scored
COMPLETE_DIR = "complete"


def _complete_list(scores_root: Path, day: str) -> Path:
    return scores_root / COMPLETE_DIR / f"{day}.txt"


class Ledger:
    """A forecast ledger in folder ``root`` (created on first write).

    ``writer_id``: names this writer's files (one per gateway: e.g. host and process).
    ``features``: whose mean and quantiles are kept (close by default). ``keep_paths``: also
    keep the close sample paths. ``retention_days`` / ``retention_bytes``: what
    ``enforce_retention`` keeps (None: no limit).
    """

    def __init__(self, root: str | os.PathLike, writer_id: str = "local", *,
                 features: Sequence[str] = DEFAULT_FEATURES, keep_paths: bool = False,
                 retention_days: float | None = None, retention_bytes: int | None = None):
        if not WRITER_ID.fullmatch(writer_id):
            raise ValueError(f"writer_id must match {WRITER_ID.pattern}, got {writer_id!r}")
        if "close" not in features:
            raise ValueError("a ledger keeps the close (its scores are of the close)")
        self.root = Path(root)
        self.writer_id = writer_id
        self.features = tuple(features)
        self.keep_paths = bool(keep_paths)
        self.retention_days = retention_days
        self.retention_bytes = retention_bytes
        self.skipped: list[tuple[Path, str]] = []  # unreadable files met by the last read

    def __repr__(self) -> str:
        return f"Ledger({str(self.root)!r}, writer_id={self.writer_id!r})"

    @property
    def scores_root(self) -> Path:
        return self.root / SCORES_DIR

    # -- writing ---------------------------------------------------------------

    def record(self, records: Sequence[ForecastRecord]) -> Path | None:
        """Append forecasts (of one request or several) as one new file (atomic) in the day
        partition of their request time, one file per day when they span midnight; returns the
        (last) file's path, None when there is nothing to record. Raises ``LedgerWriteError``
        (unwritable folder, full disk): the files of days already written stay, and earlier
        files are untouched."""
        if not records:
            return None
        now = datetime.now(timezone.utc)
        table = to_table(records, self.features, self.keep_paths, now_ns=utc_ns(now))
        if table.num_rows == 0:
            return None
        times = table["request_time"].cast(pa.int64()).to_numpy()  # (rows,) ns
        days = times // NS_PER_DAY
        unique = np.unique(days)
        path = None
        for day in unique:
            part = table if len(unique) == 1 else table.filter(pa.array(days == day))
            path = self.root / _partition_of(int(day) * NS_PER_DAY) / _file_name(
                self.writer_id, now
            )
            write_parquet_atomic(path, part)
        return path

    def write_scores(self, table: pa.Table) -> Path | None:
        """Append scores (one file, atomic) under ``scores/date=<today UTC>/``."""
        if table.num_rows == 0:
            return None
        now = datetime.now(timezone.utc)
        path = (
            self.scores_root / f"date={now.strftime('%Y-%m-%d')}" / _file_name(self.writer_id, now)
        )
        write_parquet_atomic(path, table)
        return path

    # -- reading ---------------------------------------------------------------

    def files(self, since: Any = None) -> list[Path]:
        """The forecast files (partitions from ``since``'s UTC date on), oldest first."""
        return partition_files(self.root, _since_day(since)[0])

    def read(
        self, since: Any = None, model: str | None = None, symbol: str | None = None
    ) -> pa.Table:
        """Recorded forecast rows (requests at or after ``since``, of ``model`` (its SHA-256, or
        a prefix of it, or its name) and ``symbol``). Unreadable files are skipped with a
        warning naming them (also in ``self.skipped``); never raises for them."""
        day, since_ns = _since_day(since)
        self.skipped = []
        table = read_files(partition_files(self.root, day), self.skipped)
        if table is None:
            return empty_forecasts(self.features)
        return filter_rows(table, "request_time", since_ns, model, symbol)

    def read_scores(
        self, since: Any = None, model: str | None = None, symbol: str | None = None
    ) -> pa.Table:
        """Persisted scores (scored at or after ``since``), same filters and skipping as
        ``read``."""
        day, since_ns = _since_day(since)
        self.skipped = []
        table = read_files(partition_files(self.scores_root, day), self.skipped)
        if table is None:
            return empty_scores()
        return filter_rows(table, "scored_at", since_ns, model, symbol)

    def complete_files(self) -> set[str]:
        """Names (``date=.../<file>``) of forecast files every step of which is scored: the
        scorer reads them no more."""
        out: set[str] = set()
        d = self.scores_root / COMPLETE_DIR
        try:
            entries = list(os.scandir(d))
        except FileNotFoundError:
            return out
        for e in entries:
            if e.name.endswith(".txt"):
                try:
                    lines = Path(e.path).read_text().splitlines()
                except OSError:
                    continue
                day = e.name[: -len(".txt")]
                out.update(f"{day}/{ln}" for ln in lines if ln.endswith(SUFFIX))
        return out

    def mark_complete(self, files: Iterable[Path]) -> None:
        """Note forecast files as completely scored (appended to their day's list; a line cut
        by a crash names no file and is ignored, the file is then read and noted again)."""
        by_day: dict[str, list[str]] = {}
        for f in files:
            by_day.setdefault(f.parent.name, []).append(f.name)
        for day, names in by_day.items():
            path = _complete_list(self.scores_root, day)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a") as fh:
                    fh.write("".join(n + "\n" for n in names))
            except OSError as exc:
                raise LedgerWriteError(
                    f"cannot write {path}: {exc.strerror or exc}", exc.errno
                ) from exc

    # -- retention -------------------------------------------------------------

    def enforce_retention(self, days: float | None = None, max_bytes: int | None = None,
                          now: datetime | None = None) -> list[Path]:
        """Remove what the retention settings (``days`` / ``max_bytes``, else the ledger's
        ``retention_days`` / ``retention_bytes``) no longer keep; returns the removed files.

        Days: partitions (forecasts and scores) whose date is older than ``retention_days``
        before ``now``'s UTC date. Bytes: the oldest forecast files until forecasts and
        scores together fit; a scores file goes only once every forecast file of its date and
        before is gone (so no forecast is ever scored twice). Stale temporary files
        (crashed writes, older than an hour) are removed too."""
        now = now or datetime.now(timezone.utc)
        days = self.retention_days if days is None else days
        max_bytes = self.retention_bytes if max_bytes is None else max_bytes
        removed: list[Path] = []
        removed += self._remove_stale_tmp(now)
        if days is not None:
            cutoff = now.date() - timedelta(days=float(days))
            for base in (self.root, self.scores_root):
                for d in _partitions(base):
                    if d[0] < cutoff:
                        removed += sorted(p for p in d[1].iterdir() if p.is_file())
                        shutil.rmtree(d[1], ignore_errors=True)
                        _unlink(_complete_list(self.scores_root, d[1].name))
        if max_bytes is not None:
            removed += self._enforce_bytes(int(max_bytes))
        return removed

    def _enforce_bytes(self, limit: int) -> list[Path]:
        forecasts = [(p, _size(p)) for p in partition_files(self.root)]
        scores = [(p, _size(p)) for p in partition_files(self.scores_root)]
        total = sum(s for _, s in forecasts) + sum(s for _, s in scores)
        removed: list[Path] = []
        while total > limit:
            # oldest first; a scores file only once no forecast of its day or before is left
            if scores and (not forecasts or _day_of(scores[0][0]) < _day_of(forecasts[0][0])):
                p, s = scores.pop(0)
            elif forecasts:
                p, s = forecasts.pop(0)
            else:
                break
            _unlink(p)
            removed.append(p)
            total -= s
        for base in (self.root, self.scores_root):
            for _, d in _partitions(base):
                try:
                    d.rmdir()  # only when empty
                except OSError:
                    pass
        return removed

    def _remove_stale_tmp(self, now: datetime) -> list[Path]:
        out = []
        limit = now.timestamp() - STALE_TMP_S
        for base in (self.root, self.scores_root):
            for _, d in _partitions(base):
                for p in d.iterdir():
                    if p.name.startswith(".") and p.name.endswith(".tmp"):
                        try:
                            if p.stat().st_mtime < limit:
                                p.unlink()
                                out.append(p)
                        except OSError:
                            pass
        return out

    def disk_bytes(self) -> int:
        """Bytes of the forecast and score files."""
        return sum(_size(p) for p in partition_files(self.root) + partition_files(self.scores_root))


def _partitions(base: Path) -> list[tuple[date, Path]]:
    out = []
    try:
        for e in os.scandir(base):
            m = PARTITION.match(e.name)
            if m and e.is_dir():
                out.append((date.fromisoformat(m.group(1)), Path(e.path)))
    except FileNotFoundError:
        pass
    return sorted(out)


def _day_of(path: Path) -> date:
    m = PARTITION.match(path.parent.name)
    if not m:  # pragma: no cover - partition_files only lists partitions
        raise LedgerError(f"{path} is not in a date= partition")
    return date.fromisoformat(m.group(1))


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except FileNotFoundError:
        pass


def filter_rows(table: pa.Table, time_column: str, since_ns: int | None, model: str | None,
                symbol: str | None) -> pa.Table:
    """Rows with ``time_column`` >= since, of ``model`` (SHA-256, prefix or name) and ``symbol``."""
    mask = None

    def both(a, b):
        return b if a is None else pc.and_(a, b)

    if since_ns is not None:
        t = pc.cast(table[time_column], pa.int64())
        mask = both(mask, pc.greater_equal(t, since_ns))
    if model:
        by_sha = pc.starts_with(table["model_sha256"], model)
        names = table["model_name"] if "model_name" in table.column_names else None
        m = by_sha if names is None else pc.or_(by_sha, pc.equal(names, model))
        mask = both(mask, pc.fill_null(m, False))
    if symbol:
        mask = both(mask, pc.equal(table["symbol"], symbol))
    return table if mask is None else table.filter(mask)


def empty_forecasts(features: Sequence[str] = DEFAULT_FEATURES) -> pa.Table:
    """A forecast table with no rows (the columns every ledger file has)."""
    return to_table([], features)
