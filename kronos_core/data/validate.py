"""Validation (and explicit repair) of imported candle tables.

Every problem is reported with its column and 1-based data row numbers (row 1 is
the first row after a CSV header, so CSV line = row + 1). Nothing is changed
silently: a problem either raises ``CandleError`` or, when its repair flag is on,
is repaired and logged with the rows it touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from kronos_core.candles import (
    AMOUNT_COLUMN,
    FEATURES,
    PRICE_COLUMNS,
    VOLUME_COLUMN,
    CandleError,
    fill_volume_amount,
)

log = logging.getLogger(__name__)

TIME_ALIASES = ("timestamps", "timestamp", "datetime", "date", "time")
MAX_ROWS_SHOWN = 10


@dataclass(frozen=True)
class Repairs:
    """Which problems to repair instead of refusing the file."""

    drop_nan: bool = False  # drop rows with a missing/unparseable time or NaN/inf value
    drop_duplicates: bool = False  # keep the last row of each duplicated timestamp
    sort: bool = False  # sort rows by time
    fix_high_low: bool = False  # high = max(open, high, low, close), low = min(...)
    clip_negative: bool = False  # negative volume/amount -> 0

    @classmethod
    def all(cls) -> Repairs:
        return cls(**{f.name: True for f in fields(cls)})


@dataclass
class ValidationReport:
    source: str
    rows_in: int
    rows_out: int = 0
    repairs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rows(positions, rownums: np.ndarray) -> str:
    positions = np.asarray(positions)
    shown = ", ".join(str(int(r)) for r in rownums[positions[:MAX_ROWS_SHOWN]])
    more = f" and {len(positions) - MAX_ROWS_SHOWN} more" if len(positions) > MAX_ROWS_SHOWN else ""
    return f"row{'s' if len(positions) > 1 else ''} {shown}{more}"


def _find_time_column(df: pd.DataFrame, time_column: str | None) -> str:
    if time_column is not None:
        key = time_column.strip().lower()
        if key not in df.columns:
            raise CandleError(f"time column {time_column!r} not found; columns: {list(df.columns)}")
        return key
    for alias in TIME_ALIASES:
        if alias in df.columns:
            return alias
    raise CandleError(
        f"no time column: expected one of {list(TIME_ALIASES)} (or --time-column); columns: {list(df.columns)}"
    )


def validate_candles(
    df: pd.DataFrame,
    *,
    source: str = "<frame>",
    time_column: str | None = None,
    timezone: str | None = None,
    repairs: Repairs = Repairs(),
    row_numbers=None,
) -> tuple[pd.DataFrame, str | None, ValidationReport]:
    """Check (and, by flag, repair) a raw candle table.

    Returns ``(frame, timezone, report)``: ``frame`` has ``timestamps`` (naive local
    wall clock, sorted, unique) and the six ``FEATURES`` as float64; ``timezone`` is
    ``timezone`` or the zone of tz-aware input stamps (converted to its wall clock).
    Missing ``volume``/``amount`` follow the model's rules (``fill_volume_amount``).
    Raises ``CandleError`` listing every problem found, with rows and columns.
    ``row_numbers``: the file's row numbers of ``df``'s rows (default 1..n).
    """
    report = ValidationReport(source=source, rows_in=len(df))
    df = df.copy()
    if isinstance(df.index, pd.DatetimeIndex) and not any(
        a in [str(c).strip().lower() for c in df.columns] for a in TIME_ALIASES
    ):
        df = df.reset_index(names="timestamps")
    df.columns = [str(c).strip().lower() for c in df.columns]
    tcol = _find_time_column(df, time_column)
    missing = [c for c in PRICE_COLUMNS if c not in df.columns]
    if missing:
        raise CandleError(
            f"{source}: required column(s) {missing} missing; columns: {list(df.columns)}"
        )
    if len(df) == 0:
        raise CandleError(f"{source}: no rows")

    rownums = np.arange(1, len(df) + 1) if row_numbers is None else np.asarray(row_numbers)
    problems: list[str] = []

    # -- timestamps -------------------------------------------------------------
    raw_t = df[tcol]
    if pd.api.types.is_datetime64_any_dtype(raw_t):
        t = pd.DatetimeIndex(raw_t)
    else:
        t = pd.DatetimeIndex(pd.to_datetime(raw_t, errors="coerce", format="mixed"))
    if t.tz is not None:
        if timezone is not None:
            t = t.tz_convert(timezone)
        timezone = str(t.tz)
        t = t.tz_localize(None)
    t = t.as_unit("ns")
    bad_t = np.flatnonzero(t.isna())

    # -- numbers ----------------------------------------------------------------
    present = [c for c in FEATURES if c in df.columns]
    num = {}
    bad_num = np.zeros(len(df), bool)
    for c in present:
        col = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        nan = ~np.isfinite(col)
        if nan.any():
            text = df[c].notna().to_numpy() & nan & np.isnan(col)
            kind = "non-numeric or missing" if text.any() else "NaN/missing or infinite"
            msg = f"column '{c}': {kind} value in {int(nan.sum())} {_rows(np.flatnonzero(nan), rownums)}"
            if repairs.drop_nan:
                report.repairs.append("dropped: " + msg)
            else:
                problems.append(msg + " (--drop-nan drops these rows)")
            bad_num |= nan
        num[c] = col
    if len(bad_t):
        msg = (
            f"column '{tcol}': missing or unparseable time in {len(bad_t)} {_rows(bad_t, rownums)}"
        )
        if repairs.drop_nan:
            report.repairs.append("dropped: " + msg)
        else:
            problems.append(msg + " (--drop-nan drops these rows)")
    if problems:  # the remaining checks need clean values
        raise CandleError(f"{source}: " + "; ".join(problems))
    keep = ~bad_num
    keep[bad_t] = False
    frame = pd.DataFrame(
        {"timestamps": t.asi8[keep].view("datetime64[ns]"), **{c: v[keep] for c, v in num.items()}}
    )
    rownums = rownums[keep]

    # -- order and duplicates -----------------------------------------------------
    ts = frame["timestamps"].to_numpy().view(np.int64)
    back = np.flatnonzero(ts[1:] < ts[:-1]) + 1
    if len(back):
        msg = f"column '{tcol}': timestamps not sorted, earlier than the row before in {len(back)} {_rows(back, rownums)}"
        if repairs.sort:
            report.repairs.append("sorted: " + msg)
            order = np.argsort(ts, kind="stable")
            frame = frame.iloc[order].reset_index(drop=True)
            rownums = rownums[order]
            ts = ts[order]
        else:
            problems.append(msg + " (--sort sorts them)")
    dup = pd.Series(ts).duplicated(keep=False).to_numpy()
    if dup.any():
        pos = np.flatnonzero(dup)
        msg = f"column '{tcol}': duplicate timestamps in {len(pos)} {_rows(pos, rownums)}"
        if repairs.drop_duplicates:
            last = ~pd.Series(ts).duplicated(keep="last").to_numpy()
            report.repairs.append("kept the last of each duplicate: " + msg)
            frame = frame[last].reset_index(drop=True)
            rownums = rownums[last]
        else:
            problems.append(msg + " (--drop-duplicates keeps the last of each)")

    # -- candle consistency --------------------------------------------------------
    o, h, lo, c = (frame[k].to_numpy() for k in PRICE_COLUMNS)
    bad_h = np.flatnonzero(h < np.maximum(np.maximum(o, c), lo))
    bad_l = np.flatnonzero(lo > np.minimum(o, c))
    for col, pos, what in (
        ("high", bad_h, "high below open/close/low"),
        ("low", bad_l, "low above open/close"),
    ):
        if len(pos):
            msg = f"column '{col}': {what} in {len(pos)} {_rows(pos, rownums)}"
            if repairs.fix_high_low:
                report.repairs.append("fixed: " + msg)
            else:
                problems.append(msg + " (--fix-high-low repairs them)")
    if repairs.fix_high_low and (len(bad_h) or len(bad_l)):
        frame["high"] = np.maximum.reduce([o, h, lo, c])
        frame["low"] = np.minimum.reduce([o, h, lo, c])
    for col in (VOLUME_COLUMN, AMOUNT_COLUMN):
        if col in frame.columns:
            pos = np.flatnonzero(frame[col].to_numpy() < 0)
            if len(pos):
                msg = f"column '{col}': negative value in {len(pos)} {_rows(pos, rownums)}"
                if repairs.clip_negative:
                    report.repairs.append("set to 0: " + msg)
                    frame[col] = np.maximum(frame[col].to_numpy(), 0.0)
                else:
                    problems.append(msg + " (--clip-negative sets them to 0)")
    if problems:
        raise CandleError(f"{source}: " + "; ".join(problems))

    # -- the model's volume/amount rules ---------------------------------------------
    if VOLUME_COLUMN not in frame.columns:
        report.notes.append("no 'volume' column: volume = amount = 0 (the model's rule)")
    elif AMOUNT_COLUMN not in frame.columns:
        report.notes.append(
            "no 'amount' column: amount = volume * mean(open, high, low, close) (the model's rule)"
        )
    frame = fill_volume_amount(frame)[["timestamps", *FEATURES]]
    frame[list(FEATURES)] = frame[list(FEATURES)].astype(np.float64)
    if len(frame) == 0:
        raise CandleError(f"{source}: no rows left after repairs")
    report.rows_out = len(frame)
    for line in report.repairs:
        log.warning("%s: %s", source, line)
    for line in report.notes:
        log.info("%s: %s", source, line)
    return frame, timezone, report
