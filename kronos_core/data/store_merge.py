"""One symbol's next file content: new candles checked against the stored series (bar size,
time zone) and merged into it by timestamp. Pure: reads the stored file's arrays, writes
nothing; ``KlineWriter.write`` and ``StoreTransaction.write`` write what it returns.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from kronos_core.base.candles import CandleError
from kronos_core.data.fileformat import FileEntry, file_metadata, frame_arrays, to_table

log = logging.getLogger(__name__)

_STEP = re.compile(r"^([0-9]+)(ns|s|min|h|d|w)$")
_UNIT_NS = {"ns": 1, "s": 10**9, "min": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9,
            "w": 7 * 86400 * 10**9}
MAX_STAMPS_SHOWN = 5


def frequency_ns(frequency: str) -> int | None:
    """The bar size of a frequency name (``5min``, ``1h``, ``1d``, ``1w``...) in ns; None for
    names without a fixed size (``1mo``, or a name of the user's own)."""
    m = _STEP.match(frequency)
    return None if m is None else int(m.group(1)) * _UNIT_NS[m.group(2)]


def check_bar_size(symbol: str, ts: np.ndarray, frequency: str, stored: bool = True) -> None:
    """Refuse candles whose own steps do not fit bars of ``frequency``, naming both bar sizes
    and the first offending candles.

    Bars of size f are never closer than f: a step below half of f (half: weekly bars moved
    by a holiday stay legal) means finer bars. A file of at least four candles none of whose
    steps is at most f, with every step at least twice f, holds coarser bars (a gap between
    sessions is one step, not all of them). ``stored``: the frequency is the stored series'
    (else the one asked for with ``--frequency``), for the message."""
    size = frequency_ns(frequency)
    if size is None or len(ts) < 2:
        return
    from kronos_core.data.sessions import infer_frequency

    steps = np.diff(ts)
    finer = np.flatnonzero(steps * 2 < size)
    coarser = len(ts) >= 4 and bool((steps >= 2 * size).all())
    if not len(finer) and not coarser:
        return
    bad = (finer if len(finer) else np.arange(len(steps))) + 1  # the candle after each step
    shown = ", ".join(str(pd.Timestamp(int(ts[i]))) for i in bad[:MAX_STAMPS_SHOWN])
    more = f" and {len(bad) - MAX_STAMPS_SHOWN} more" if len(bad) > MAX_STAMPS_SHOWN else ""
    whose = f"the stored series {symbol} is {frequency}" if stored else "--frequency is "
    whose += "" if stored else frequency
    raise CandleError(
        f"{symbol}: the file's bars are {infer_frequency(ts)} (its most common step), but "
        f"{whose}; first offending candles at {shown}{more}. Import other bar sizes as their own "
        "frequency (--frequency with the file's bar size) or resample them first"
    )


@dataclass
class SymbolUpdate:
    """What a write of one symbol comes to: the metadata of its next file, the table to write
    (None: the candles and metadata are already stored as they are; nothing to write), the
    rows it held before, and a one-line report. ``changed``: whether there is something to
    write (kept when a writer drops ``table`` after writing it)."""

    meta: dict
    table: pa.Table | None
    rows_before: int
    report: str
    changed: bool = True


class CandleArrays(NamedTuple):
    """Candles as arrays, for writers that already hold them (an import's day file, split by
    symbol without a DataFrame per symbol): what ``frame_arrays`` makes of a frame."""

    ts: np.ndarray  # (n,) int64 ns, naive wall clock
    values: np.ndarray  # (n, 6) float64, FEATURES order
    timezone: str | None = None  # of aware stamps (None: naive)


def new_candles(symbol: str, frame: pd.DataFrame | CandleArrays, timezone: str | None):
    """``(ts int64 ns, values (n, 6), timezone)`` of candles to write, re-checked (rows,
    finite, sorted and unique); tz-aware stamps go to ``timezone``'s wall clock (or their
    own zone's)."""
    if isinstance(frame, CandleArrays):
        ts_new, val_new, frame_tz = frame
    else:
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


def next_content(
    symbol: str,
    ts_new: np.ndarray,
    val_new: np.ndarray,
    timezone: str | None,
    old: FileEntry | None,
    *,
    frequency: str,
    frequency_from: str,
    source: str | None,
    on_overlap: str,
    extra_metadata: dict | None,
    missing: tuple[str, ...] = (),
) -> SymbolUpdate:
    """The symbol's next content: ``old`` (its stored file, None: new or overwritten) merged
    with the new candles (``ts_new`` int64 ns (n,), ``val_new`` (n, 6)). Raises
    ``CandleError`` for another bar size, another time zone or (``on_overlap="error"``)
    overlapping candles with other values. ``frequency_from``: where ``frequency`` came from,
    ``"stored"`` (the series'), ``"given"`` (the caller's) or ``"inferred"`` (from these
    candles: nothing to check them against). ``missing``: the optional columns the source
    lacked (filled by the model's rules): a missing volume is refused when the stored series
    has volumes (it would append zeros to real volumes)."""
    if frequency_from != "inferred":
        check_bar_size(symbol, ts_new, frequency, frequency_from == "stored")
    meta: dict = {}
    rows_before = 0
    if old is not None:
        rows_before = len(old.ts)
        meta = {k: v for k, v in old.meta.items() if k not in ("rows", "first", "last")}
        old_tz = meta.get("timezone")
        if timezone and old_tz and timezone != old_tz:
            raise CandleError(
                f"{symbol}: stored time zone is {old_tz!r}, new candles are {timezone!r}; if the "
                f"file's stamps are on the {old_tz} clock, say so with --timezone {old_tz} "
                "(stamps with an offset are converted to it)"
            )
        timezone = timezone or old_tz
        if "volume" in missing and len(old.ts) and bool((old.cols[4] != 0).any()):
            raise CandleError(
                f"{symbol}: the file has no 'volume' column, but the stored series has volumes: "
                "appending would store zero volumes. Map the file's volume column with "
                "--column volume=COLUMN"
            )
        ts, values, report = merge(
            symbol, old.ts, np.stack(old.cols, axis=1), ts_new, val_new, on_overlap
        )
    else:
        ts, values = ts_new, val_new
        report = f"{len(ts)} new candles"
    meta.update(extra_metadata or {})
    record_sessions(meta, ts)
    meta = file_metadata(
        meta, symbol=symbol, frequency=frequency, timezone=timezone,
        source=source if source is not None else meta.get("source"), ts=ts,
    )
    if old is not None and _same(old, ts, values, meta):
        return SymbolUpdate(meta, None, rows_before, report + "; unchanged, not rewritten", False)
    return SymbolUpdate(meta, to_table(ts, values, meta), rows_before, report)


def record_sessions(meta: dict, ts: np.ndarray) -> None:
    """``meta["sessions"]``: the round-the-clock calendar (``24/7``) inferred from the whole
    stored history ``ts`` when no exchange names one, so that future timestamps never depend on
    the few candles a forecast reads (``kronos_core.data.round_clock``); dropped otherwise."""
    from kronos_core.data.round_clock import infer_round_clock

    inferred = None if meta.get("exchange") else infer_round_clock(ts)
    if inferred is None:
        meta.pop("sessions", None)
    else:
        meta["sessions"] = inferred


def _same(old: FileEntry, ts: np.ndarray, values: np.ndarray, meta: dict) -> bool:
    """Whether the stored file already holds exactly these candles and metadata."""
    if len(old.ts) != len(ts) or not np.array_equal(old.ts, ts):
        return False
    if not all(np.array_equal(c, values[:, j]) for j, c in enumerate(old.cols)):
        return False
    stored = {k: v for k, v in old.meta.items()}
    return stored == meta


def merge(
    symbol, ts_old, val_old, ts_new, val_new, on_overlap
) -> tuple[np.ndarray, np.ndarray, str]:
    """Stored and new candles merged by timestamp; see ``KlineWriter.write``'s
    ``on_overlap``."""
    if len(ts_old) and len(ts_new) and ts_new[0] > ts_old[-1]:  # an append: nothing to sort
        report = (f"{len(ts_old)} stored + {len(ts_new)} new -> {len(ts_old) + len(ts_new)} "
                  f"candles ({len(ts_new)} added, 0 identical overlaps, 0 conflicts "
                  f"'{on_overlap}')")
        return np.concatenate([ts_old, ts_new]), np.concatenate([val_old, val_new]), report
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
