"""Writing the Arrow K-line store: ``KlineWriter`` adds candles to a symbol's file
(merged by timestamp, atomically, under the symbol's lock) and writes each frequency
directory's read snapshot (``compact``). See ``docs/store.md``.

Every write replaces the symbol's file atomically (a new inode), so readers holding the
old mapping keep a whole old version and readers that re-``stat`` see the new one.
"""

from __future__ import annotations

import logging
import os

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
    SymbolLock,
    file_metadata,
    frame_arrays,
    open_file,
    stat_key,
    symbol_file,
    to_table,
    write_arrow_atomic,
)
from kronos_core.data.snapshot import SNAPSHOT_NAME, write_snapshot
from kronos_core.data.store_dir import StoreDirectory

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
        from kronos_core.data.sessions import infer_frequency

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
            _record_sessions(meta, ts)
            meta = file_metadata(
                meta, symbol=symbol, frequency=frequency, timezone=timezone,
                source=source if source is not None else meta.get("source"), ts=ts,
            )
            table = to_table(ts, values, meta)
            write_arrow_atomic(path, table, fsync=fsync)
        return meta


def _record_sessions(meta: dict, ts: np.ndarray) -> None:
    """``meta["sessions"]``: the round-the-clock calendar (``24/7``) inferred from the whole
    stored history ``ts`` when no exchange names one, so that future timestamps never depend on
    the few candles a forecast reads (``kronos_core.data.round_clock``); dropped otherwise."""
    from kronos_core.data.round_clock import infer_round_clock

    inferred = None if meta.get("exchange") else infer_round_clock(ts)
    if inferred is None:
        meta.pop("sessions", None)
    else:
        meta["sessions"] = inferred


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
        raise CandleError(
            f"{symbol}: timestamps must be sorted and unique (validate before writing)"
        )
    return ts_new, val_new, timezone


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
            f"{symbol}: {len(conflicts)} new candle(s) overlap stored candles with different "
            f"values (first at {first}); choose on_overlap='keep' or 'replace' (--on-overlap)"
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
        f"({added} added, {int(same.sum())} identical overlaps, {len(conflicts)} conflicts "
        f"'{on_overlap}')"
    )
    return all_ts[keep], all_val[keep], report
