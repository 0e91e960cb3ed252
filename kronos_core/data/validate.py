"""Validation (and explicit repair) of imported candle tables.

Row numbers: every problem names its column and **1-based data rows**: row 1 is the first
row after a CSV header (so the CSV file line is row + 1), whatever the caller (``kronos
import``, ``kronos forecast``). Nothing is changed silently: a problem either raises
``CandleError`` or, when its repair flag is on, is repaired and reported with the rows it
touched. All problems of a table are reported together, in one error.

``validate_candles`` is a dispatcher over small checks (``CHECKS``), each of which looks at
one kind of problem and either records it or repairs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from kronos_core.base.candles import (
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
    drop_nonpositive: bool = False  # drop rows with a zero or negative price

    @classmethod
    def all(cls) -> Repairs:
        return cls(**{f.name: True for f in fields(cls)})


@dataclass
class ValidationReport:
    """What validation did: rows in and out, repairs made, notes (the model's volume and
    amount rules) and warnings (columns left unused)."""

    source: str
    rows_in: int
    rows_out: int = 0
    repairs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    filled: tuple[str, ...] = ()  # the optional columns the file lacked (filled by the rules)
    groups: np.ndarray | None = None  # with ``groups=``: each output row's group code


@dataclass
class _Table:
    """The table being checked: parsed frame (``timestamps`` int64-view-able plus the
    numeric columns), each row's 1-based data row number, and what was found so far."""

    frame: pd.DataFrame
    rownums: np.ndarray
    tcol: str
    repairs: Repairs
    report: ValidationReport
    problems: list[str] = field(default_factory=list)
    groups: np.ndarray | None = None  # (n,) group codes (``validate_candles(groups=)``)
    # rows already refused by an earlier check: later checks leave them alone, so one bad
    # value is one complaint (a negative close is not also "low above open/close")
    refused: np.ndarray | None = None
    unparsed_kept: np.ndarray | None = None  # (rows in,) the rows parsing kept

    @property
    def ts(self) -> np.ndarray:
        return self.frame["timestamps"].to_numpy().view(np.int64)

    def found(self, msg: str, repaired: bool, done: str, hint: str) -> None:
        """Record a problem: as a repair made (``done``: what was done) or as a refusal
        with the flag that would repair it (``hint``)."""
        if repaired:
            self.report.repairs.append(f"{done}: {msg}")
        else:
            self.problems.append(f"{msg} ({hint})")

    def keep(self, mask: np.ndarray) -> None:
        self.frame = self.frame[mask].reset_index(drop=True)
        self.rownums = self.rownums[mask]
        if self.groups is not None:
            self.groups = self.groups[mask]
        if self.refused is not None:
            self.refused = self.refused[mask]

    def refuse_rows(self, positions: np.ndarray) -> None:
        """Mark rows (positions in ``frame``) as refused, for the checks after this one."""
        if self.refused is None:
            self.refused = np.zeros(len(self.frame), bool)
        self.refused[positions] = True

    def unrefused(self) -> np.ndarray:
        """Mask of the rows no earlier check refused."""
        if self.refused is None:
            return np.ones(len(self.frame), bool)
        return ~self.refused


def _rows(positions, rownums: np.ndarray) -> str:
    positions = np.asarray(positions)
    shown = ", ".join(str(int(r)) for r in rownums[positions[:MAX_ROWS_SHOWN]])
    more = f" and {len(positions) - MAX_ROWS_SHOWN} more" if len(positions) > MAX_ROWS_SHOWN else ""
    return f"row{'s' if len(positions) > 1 else ''} {shown}{more}"


# ----------------------------------------------------------------------------- columns


def _normalize_columns(
    df: pd.DataFrame, column_map: Mapping[str, str] | None, source: str
) -> pd.DataFrame:
    """Lower-cased, stripped column names, then ``column_map`` (our name -> the file's
    column, any case) applied as a rename."""
    if isinstance(df.index, pd.DatetimeIndex) and not any(
        a in [str(c).strip().lower() for c in df.columns] for a in TIME_ALIASES
    ):
        df = df.reset_index(names="timestamps")
    df = df.copy()
    df.columns = [str(c).strip().lower() for c in df.columns]
    if not column_map:
        return df
    rename = {}
    for ours, theirs in column_map.items():
        key = str(theirs).strip().lower()
        if key not in df.columns:
            raise CandleError(
                f"{source}: --column {ours}={theirs}: no column {theirs!r}; columns: "
                f"{list(df.columns)}"
            )
        rename[key] = str(ours).strip().lower()
    clash = [new for old, new in rename.items() if new in df.columns and new not in rename]
    df = df.drop(columns=clash).rename(columns=rename)
    return df


def _find_time_column(df: pd.DataFrame, time_column: str | None) -> str | None:
    if time_column is not None:
        key = time_column.strip().lower()
        return key if key in df.columns else None
    return next((a for a in TIME_ALIASES if a in df.columns), None)


def _check_columns(df: pd.DataFrame, time_column: str | None, source: str) -> str:
    """The time column's name; raises one error naming every missing column."""
    tcol = _find_time_column(df, time_column)
    missing = []
    if tcol is None:
        missing.append(
            f"time column {time_column!r} not found"
            if time_column is not None
            else f"no time column: expected one of {list(TIME_ALIASES)} (or --time-column)"
        )
    lacking = [c for c in PRICE_COLUMNS if c not in df.columns]
    if lacking:
        missing.append(f"required column(s) {lacking} missing (map one with --column close=COL)")
    if missing:
        raise CandleError(f"{source}: " + "; ".join(missing) + f"; columns: {list(df.columns)}")
    if len(df) == 0:
        raise CandleError(f"{source}: no rows")
    assert tcol is not None  # else ``missing`` named it, and we raised
    return tcol


# columns that name the row's instrument (``kronos import`` reads them, see
# ``importer.symbol_column_of``): never hinted at as a price or volume
SYMBOL_NAMES = ("symbol", "ticker", "ts_code", "code", "instrument")
ADJUSTED_CLOSE_NAMES = ("adj close", "adj_close", "adjclose", "adj. close", "adjusted close",
                        "adjusted_close")


# what vendors call the traded quantity and the traded value
VOLUME_NAMES = ("vol", "qty", "quantity", "shares", "size", "lots")
AMOUNT_NAMES = ("amt", "amount", "turnover", "value", "notional", "money")


def _feature_guess(name: str) -> str | None:
    """``amount`` or ``volume`` when column ``name`` (lower case) looks like one, else None."""
    words = name.replace("_", " ").replace(".", " ").split()
    if any(w in AMOUNT_NAMES for w in words):
        return AMOUNT_COLUMN
    if any(w in VOLUME_NAMES or w.startswith("vol") for w in words):
        return VOLUME_COLUMN
    return None


def _unused_hint(name: str, shown: str, present: set[str]) -> str:
    """Why column ``name`` (lower-cased; ``shown``: as the file spells it) is unused and how
    to use it: an adjusted close as the close, a symbol column by ``--symbol-column``, else an
    optional feature the file lacks."""
    if name in SYMBOL_NAMES:
        return (f"column {shown!r} names the symbol and is not used here (kronos import reads it "
                f"with --symbol-column {shown!r})")
    if name in ADJUSTED_CLOSE_NAMES:
        return (f"column {shown!r} is not used: adjusted prices are usually what a model should "
                "see (a split or dividend otherwise looks like a price move); use it as the close "
                f"with --column close={shown!r} (open, high and low stay as filed: rows the "
                "adjustment moves the close outside of are reported)")
    lacking = [f for f in (VOLUME_COLUMN, AMOUNT_COLUMN) if f not in present]
    if lacking:
        guess = _feature_guess(name)
        target = guess if guess in lacking else lacking[0]
        return (f"column {shown!r} is not used (if it holds the {target}, map it with "
                f"--column {target}={shown!r})")
    return (f"column {shown!r} is not used (--column NAME={shown!r} would use it as one of "
            f"{', '.join(FEATURES)})")


def _unused_columns(df: pd.DataFrame, tcol: str, ignore: tuple[str, ...],
                    spelled: Mapping[str, str] | None = None) -> list[str]:
    used = {tcol, *FEATURES, *(c.strip().lower() for c in ignore)}
    present = set(df.columns)
    spelled = spelled or {}
    return [_unused_hint(c, spelled.get(c, c), present) for c in df.columns if c not in used]


def _drop_empty_optional(df: pd.DataFrame, report: ValidationReport) -> pd.DataFrame:
    """``volume`` / ``amount`` columns with no value at all (every cell null or blank) dropped,
    so that they are treated exactly as a missing column (the model's rules fill them); a
    column with some values keeps its nulls, which are reported per row."""
    empty = []
    for c in (VOLUME_COLUMN, AMOUNT_COLUMN):
        if c in df.columns:
            col = df[c]
            text = col.astype(str).str.strip()
            blank = col.isna() | text.isin(("", "nan", "NaN", "None", "null"))
            if len(col) and bool(blank.all()):
                empty.append(c)
    if empty:
        report.notes.append(f"column(s) {empty} hold no value: treated as absent")
        df = df.drop(columns=empty)
    return df


# ----------------------------------------------------------------------------- parsing


def _parse_times(raw: pd.Series, timezone: str | None) -> tuple[pd.DatetimeIndex, str | None]:
    """Naive wall-clock times (NaT where unparseable) and the time zone."""
    if pd.api.types.is_datetime64_any_dtype(raw):
        t = pd.DatetimeIndex(raw)
    else:
        t = pd.DatetimeIndex(pd.to_datetime(raw, errors="coerce", format="mixed"))
    if t.tz is not None:
        if timezone is not None:
            t = t.tz_convert(timezone)
        timezone = str(t.tz)
        t = t.tz_localize(None)
    return t.as_unit("ns"), timezone


def _parse(df: pd.DataFrame, tcol: str, timezone, rownums, repairs, report):
    """Parse times and numbers; unparseable cells are problems (or dropped rows)."""
    t, timezone = _parse_times(df[tcol], timezone)
    bad_time = np.array(t.isna())  # a copy: pandas caches the index's NaN mask
    bad = bad_time.copy()
    table = _Table(pd.DataFrame(), rownums, tcol, repairs, report)
    numbers = {}
    for c in (c for c in FEATURES if c in df.columns):
        col = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        nan = ~np.isfinite(col)
        if nan.any():
            text = df[c].notna().to_numpy() & nan & np.isnan(col)
            kind = "non-numeric or missing" if text.any() else "NaN/missing or infinite"
            msg = (f"column '{c}': {kind} value in {int(nan.sum())} "
                   f"{_rows(np.flatnonzero(nan), rownums)}")
            table.found(msg, repairs.drop_nan, "dropped", "--drop-nan drops these rows")
            bad |= nan
        numbers[c] = col
    if bad_time.any():
        pos = np.flatnonzero(bad_time)
        msg = f"column '{tcol}': missing or unparseable time in {len(pos)} {_rows(pos, rownums)}"
        table.found(msg, repairs.drop_nan, "dropped", "--drop-nan drops these rows")
    keep = ~bad  # later checks look at the clean rows
    table.frame = pd.DataFrame(
        {
            "timestamps": t.asi8[keep].view("datetime64[ns]"),
            **{c: v[keep] for c, v in numbers.items()},
        }
    )
    table.rownums = rownums[keep]
    table.unparsed_kept = keep
    return table, timezone


# ----------------------------------------------------------------------------- checks


def _check_order(tb: _Table) -> None:
    """Timestamps in file order (within each group, when grouped; a grouped table's rows are
    then put group by group, each in file order, for the later checks)."""
    if tb.groups is not None:
        by_group = np.argsort(tb.groups, kind="stable")
        tb.frame = tb.frame.iloc[by_group].reset_index(drop=True)
        tb.rownums, tb.groups = tb.rownums[by_group], tb.groups[by_group]
    ts = tb.ts
    back = np.flatnonzero((ts[1:] < ts[:-1]) & _same_group(tb)) + 1
    if len(back):
        msg = (f"column '{tb.tcol}': timestamps not sorted, earlier than the row before in "
               f"{len(back)} {_rows(back, tb.rownums)}")
        tb.found(msg, tb.repairs.sort, "sorted", "--sort sorts them")
        # later checks look at the sorted rows
        order = (np.argsort(ts, kind="stable") if tb.groups is None
                 else np.lexsort((ts, tb.groups)))
        tb.frame = tb.frame.iloc[order].reset_index(drop=True)
        tb.rownums = tb.rownums[order]
        if tb.groups is not None:
            tb.groups = tb.groups[order]


def _same_group(tb: _Table) -> np.ndarray | bool:
    """(n - 1,) whether each row is in the group of the row before it (True: ungrouped)."""
    return True if tb.groups is None else tb.groups[1:] == tb.groups[:-1]


def _check_duplicates(tb: _Table) -> None:
    stamps = pd.Series(tb.ts) if tb.groups is None else pd.DataFrame(
        {"g": tb.groups, "t": tb.ts})
    dup = stamps.duplicated(keep=False).to_numpy()
    if dup.any():
        pos = np.flatnonzero(dup)
        msg = f"column '{tb.tcol}': duplicate timestamps in {len(pos)} {_rows(pos, tb.rownums)}"
        tb.found(msg, tb.repairs.drop_duplicates, "kept the last of each duplicate",
                 "--drop-duplicates keeps the last of each")
        if tb.repairs.drop_duplicates:
            tb.keep(~stamps.duplicated(keep="last").to_numpy())


def _check_positive(tb: _Table) -> None:
    """Prices must be above zero: a zero or negative open, high, low or close is refused (or
    its row dropped), like high < low. Runs before the high/low check, so a dropped row is not
    reported twice."""
    bad = np.zeros(len(tb.frame), bool)
    for col in PRICE_COLUMNS:
        pos = np.flatnonzero(tb.frame[col].to_numpy() <= 0)
        if len(pos):
            msg = f"column '{col}': zero or negative price in {len(pos)} {_rows(pos, tb.rownums)}"
            tb.found(msg, tb.repairs.drop_nonpositive, "dropped",
                     "--drop-nonpositive drops these rows")
            bad[pos] = True
    if tb.repairs.drop_nonpositive and bad.any():
        tb.keep(~bad)
    elif bad.any():
        tb.refuse_rows(np.flatnonzero(bad))


def _check_high_low(tb: _Table) -> None:
    """``high`` at least, ``low`` at most every other price, on the rows no earlier check
    refused (a refused price's high/low complaint would be a knock-on with a wrong fix)."""
    o, h, lo, c = (tb.frame[k].to_numpy() for k in PRICE_COLUMNS)
    clean = tb.unrefused()
    bad_h = np.flatnonzero(clean & (h < np.maximum(np.maximum(o, c), lo)))
    bad_l = np.flatnonzero(clean & (lo > np.minimum(o, c)))
    for col, pos, what in (
        ("high", bad_h, "high below open/close/low"), ("low", bad_l, "low above open/close"),
    ):
        if len(pos):
            msg = f"column '{col}': {what} in {len(pos)} {_rows(pos, tb.rownums)}"
            tb.found(msg, tb.repairs.fix_high_low, "fixed", "--fix-high-low repairs them")
    if tb.repairs.fix_high_low and (len(bad_h) or len(bad_l)):
        tb.frame["high"] = np.maximum.reduce([o, h, lo, c])
        tb.frame["low"] = np.minimum.reduce([o, h, lo, c])


def _check_negative(tb: _Table) -> None:
    for col in (VOLUME_COLUMN, AMOUNT_COLUMN):
        if col in tb.frame.columns:
            pos = np.flatnonzero(tb.frame[col].to_numpy() < 0)
            if len(pos):
                msg = f"column '{col}': negative value in {len(pos)} {_rows(pos, tb.rownums)}"
                tb.found(
                    msg, tb.repairs.clip_negative, "set to 0", "--clip-negative sets them to 0"
                )
                if tb.repairs.clip_negative:
                    tb.frame[col] = np.maximum(tb.frame[col].to_numpy(), 0.0)


CHECKS: tuple[Callable[[_Table], None], ...] = (
    _check_order, _check_duplicates, _check_positive, _check_high_low, _check_negative,
)


def _model_rules(tb: _Table) -> pd.DataFrame:
    """The six ``FEATURES`` as float64, missing volume/amount filled by the model's rules."""
    tb.report.filled = tuple(c for c in (VOLUME_COLUMN, AMOUNT_COLUMN) if c not in tb.frame.columns)
    if VOLUME_COLUMN not in tb.frame.columns:
        tb.report.notes.append("no 'volume' column: volume = amount = 0 (the model's rule)")
    elif AMOUNT_COLUMN not in tb.frame.columns:
        tb.report.notes.append(
            "no 'amount' column: amount = volume * mean(open, high, low, close) (the model's rule)"
        )
    frame = fill_volume_amount(tb.frame)[["timestamps", *FEATURES]]
    frame[list(FEATURES)] = frame[list(FEATURES)].astype(np.float64)
    return frame


def validate_candles(
    df: pd.DataFrame,
    *,
    source: str = "<frame>",
    time_column: str | None = None,
    timezone: str | None = None,
    repairs: Repairs = Repairs(),
    row_numbers=None,
    column_map: Mapping[str, str] | None = None,
    ignore_columns: tuple[str, ...] = (),
    groups: np.ndarray | None = None,
) -> tuple[pd.DataFrame, str | None, ValidationReport]:
    """Check (and, by flag, repair) a raw candle table.

    Returns ``(frame, timezone, report)``: ``frame`` has ``timestamps`` (naive local
    wall clock, sorted, unique) and the six ``FEATURES`` as float64; ``timezone`` is
    ``timezone`` or the zone of tz-aware input stamps (converted to its wall clock).
    Column names are matched case-insensitively; ``column_map`` maps our names to the
    file's (``{"volume": "Vol"}``); columns left unused (not the time, a feature or one of
    ``ignore_columns``) are listed in ``report.warnings``. Missing ``volume``/``amount``, and
    those with no value at all (an all-null column is absent), follow the model's rules
    (``fill_volume_amount``). Raises ``CandleError`` listing every
    problem found, with rows and columns. ``row_numbers``: the 1-based data row numbers of
    ``df``'s rows (default 1..n). ``groups``: (n,) integer codes of several series in one
    table (a file's symbols): order and duplicates are then checked within each group, the
    output is ordered by group, then time, and ``report.groups`` holds each output row's code.
    """
    report = ValidationReport(source=source, rows_in=len(df))
    spelled = {str(c).strip().lower(): str(c).strip() for c in df.columns}
    df = _normalize_columns(df, column_map, source)
    df = _drop_empty_optional(df, report)
    tcol = _check_columns(df, time_column, source)
    report.warnings += _unused_columns(df, tcol, ignore_columns, spelled)
    rownums = np.arange(1, len(df) + 1) if row_numbers is None else np.asarray(row_numbers)
    tb, timezone = _parse(df, tcol, timezone, rownums, repairs, report)
    if groups is not None:
        tb.groups = np.asarray(groups)[tb.unparsed_kept]
    for check in CHECKS:
        check(tb)
    if tb.problems:
        raise CandleError(f"{source}: " + "; ".join(tb.problems))
    frame = _model_rules(tb)
    if len(frame) == 0:
        raise CandleError(f"{source}: no rows left after repairs")
    report.rows_out = len(frame)
    report.groups = tb.groups
    return frame, timezone, report
