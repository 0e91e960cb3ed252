"""A multi-market candle corpus folder as a data source, with its hold-outs.

The corpus is a folder of long-format Parquet files (``symbol, timestamps, open, high, low, close,
volume, amount``) and ``instruments.csv``, one row per instrument (market, frequency, time zone,
calendar, ``underlying``, ``split``, ``eval_from``, ...). It is read where it lies and never copied
into the repository.

Two hold-out rules, applied here so that every command obeys them the same way:

1. **Time.** Rows at or after an instrument's ``eval_from`` are evaluation-only. Training at any
   bar size of an underlying also leaves out every row whose bar overlaps another bar size's
   evaluation period ``[eval_from, last]`` of the same underlying (``AAPL``, ``AAPL@1h`` and
   ``AAPL@1min`` share the underlying ``AAPL``). Overlap is judged on the time each bar covers,
   not on its label (``bar_extent``): a daily bar stamped 2012-02-24 covers that whole day, so an
   hourly evaluation period starting at 2012-02-24 14:00 removes it, and the hourly bars of a
   daily evaluation period's last day are removed with it.
2. **Instruments.** ``split == "holdout_instrument"`` series are evaluation-only in full.

``Corpus.training_mask`` gives, per row, whether training may read it; evaluation picks its
rows in ``kronos_core.eval.sources`` (at or after ``eval_from``).

Data handling (the corpus's own gaps, treated as a user's data would be):

* an all-null optional column (``amount`` for most instruments, ``volume`` for FX and ^VIX) is
  treated as absent, so the model's rules fill it (volume and amount 0 without volume; amount =
  volume x mean price without amount);
* a few rows with a null volume inside an otherwise filled column get volume 0;
* equity prices are not split-adjusted in the corpus: ``adjust_splits`` finds one-bar moves that
  match a split ratio (2:1, 3:2, 3:1, ...) within 4% and at least a 30% move, and divides the
  earlier prices by the ratio (volumes multiplied), as a vendor's adjusted series would show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.base.candles import (
    AMOUNT_COLUMN,
    FEATURES,
    PRICE_COLUMNS,
    VOLUME_COLUMN,
    candle_array,
)

log = logging.getLogger(__name__)

INSTRUMENTS_FILE = "instruments.csv"
TRAIN = "train"
HOLDOUT_INSTRUMENT = "holdout_instrument"
SPLITS = (TRAIN, HOLDOUT_INSTRUMENT)
# one-bar price ratios read as a stock split (new shares per old share), and the tolerance
SPLIT_RATIOS = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 8.0, 10.0, 15.0, 20.0)
SPLIT_TOLERANCE = 0.04
SPLIT_MIN_MOVE = 0.3  # |log return| below this is never read as a split
EQUITY_CLASSES = ("equity", "etf")


class CorpusError(ValueError):
    """A corpus folder or filter that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class CorpusFilter:
    """Which instruments to read. None in a field means "any"."""

    split: str | None = None  # "train" or "holdout_instrument"
    markets: tuple[str, ...] | None = None  # e.g. ("US", "CN")
    frequencies: tuple[str, ...] | None = None  # e.g. ("1d", "1h")
    symbols: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.split is not None and self.split not in SPLITS:
            raise CorpusError(f"unknown split {self.split!r}; use one of {', '.join(SPLITS)}")


@dataclass
class CorpusSeries:
    """One instrument's whole history as the model reads it, with its corpus row."""

    symbol: str
    values: np.ndarray  # (T, 6) float32 FEATURES
    timestamps: pd.DatetimeIndex  # (T,) increasing
    info: dict  # the instrument's row of instruments.csv
    splits_adjusted: list[tuple[str, float]] = field(default_factory=list)  # (timestamp, ratio)

    @property
    def group(self) -> tuple[str, str]:
        """(market, frequency): the unit the goals are judged on."""
        return (str(self.info["market"]), str(self.info["frequency"]))

    def __len__(self) -> int:
        return len(self.values)


def adjust_splits(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, float]]]:
    """Back-adjust stock splits found as one-bar jumps (see the module docstring).

    ``frame`` has the price columns and ``volume``, oldest first. Returns the adjusted copy and
    the (timestamp, ratio) of each split found."""
    close = frame["close"].to_numpy(dtype=np.float64)
    if len(close) < 2:
        return frame, []
    prev_close = close[:-1]
    ratio = prev_close / np.where(close[1:] > 0, close[1:], np.nan)  # > 1: price fell by a split
    found: list[tuple[int, float]] = []
    for i, r in enumerate(ratio):
        if not np.isfinite(r) or abs(np.log(r)) < SPLIT_MIN_MOVE:
            continue
        for k in SPLIT_RATIOS:
            for cand in (k, 1.0 / k):  # forward split or reverse split
                if abs(r / cand - 1.0) <= SPLIT_TOLERANCE:
                    found.append((i + 1, cand))
                    break
            else:
                continue
            break
    if not found:
        return frame, []
    out = frame.copy()
    factor = np.ones(len(close))
    for row, k in found:
        factor[:row] *= k  # every row before the split is divided by its ratio
    for col in PRICE_COLUMNS:
        out[col] = out[col].to_numpy(dtype=np.float64) / factor
    if VOLUME_COLUMN in out.columns:
        out[VOLUME_COLUMN] = out[VOLUME_COLUMN].to_numpy(dtype=np.float64) * factor
    stamps = pd.DatetimeIndex(frame["timestamps"])
    return out, [(str(stamps[row]), float(k)) for row, k in found]


def _model_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The corpus's optional columns as the model's rules expect them: an all-null column is
    dropped (treated as absent), stray nulls in a filled volume/amount column become 0."""
    frame = frame.copy()
    for col in (VOLUME_COLUMN, AMOUNT_COLUMN):
        if col in frame.columns:
            if frame[col].isna().all():
                frame = frame.drop(columns=[col])
            else:
                frame[col] = frame[col].fillna(0.0)
    if VOLUME_COLUMN not in frame.columns and AMOUNT_COLUMN in frame.columns:
        # amount without volume: the model's rule is 0, 0
        frame = frame.drop(columns=[AMOUNT_COLUMN])
    return frame


class Corpus:
    """A corpus folder: its instrument table, the Parquet files, and the hold-out rules."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        table = self.root / INSTRUMENTS_FILE
        if not table.is_file():
            raise CorpusError(f"{self.root}: no {INSTRUMENTS_FILE}; a corpus folder holds it and "
                              "its Parquet files (the corpus README describes the layout)")
        inst = pd.read_csv(table)
        needed = {"symbol", "underlying", "market", "frequency", "file", "split", "eval_from",
                  "last"}
        missing = needed - set(inst.columns)
        if missing:
            raise CorpusError(f"{table}: columns {sorted(missing)} missing")
        inst["eval_from"] = pd.to_datetime(inst["eval_from"])
        inst["last"] = pd.to_datetime(inst["last"])
        self.instruments = inst.set_index("symbol", drop=False)

    # -- selection -------------------------------------------------------------------------
    def select(self, flt: CorpusFilter | None = None) -> pd.DataFrame:
        """The instrument rows that pass ``flt``; unknown markets, frequencies or symbols are
        errors that list what exists."""
        flt = flt or CorpusFilter()
        inst = self.instruments
        mask = pd.Series(True, index=inst.index)
        for column, wanted in (("market", flt.markets), ("frequency", flt.frequencies),
                               ("symbol", flt.symbols)):
            if wanted is None:
                continue
            known = set(inst[column].astype(str))
            unknown = [w for w in wanted if w not in known]
            if unknown:
                shown = sorted(known) if len(known) <= 20 else sorted(known)[:20] + ["..."]
                raise CorpusError(f"unknown {column} {unknown} in corpus {self.root}; "
                                  f"it has {shown}")
            mask &= inst[column].astype(str).isin(list(wanted))
        if flt.split is not None:
            mask &= inst["split"] == flt.split
        return inst[mask]

    # -- reading ---------------------------------------------------------------------------
    def read(self, symbols: Iterable[str], *, split_adjust: bool = True) -> list[CorpusSeries]:
        """The named instruments, oldest row first, as model inputs (see the module docstring)."""
        wanted = list(dict.fromkeys(symbols))
        unknown = [s for s in wanted if s not in self.instruments.index]
        if unknown:
            raise CorpusError(f"unknown symbols {unknown[:10]} in corpus {self.root}")
        rows = self.instruments.loc[wanted]
        frames: dict[str, pd.DataFrame] = {}
        for file, group in rows.groupby("file"):
            path = self.root / str(file)
            if not path.is_file():
                raise CorpusError(f"{path}: listed in {INSTRUMENTS_FILE} but missing")
            names = list(group["symbol"])
            df = pd.read_parquet(path, filters=[("symbol", "in", names)])
            for name, part in df.groupby("symbol", sort=False):
                frames[str(name)] = part.sort_values("timestamps").reset_index(drop=True)
        out = []
        for sym in wanted:
            if sym not in frames:
                raise CorpusError(f"{sym}: no rows in {self.instruments.loc[sym, 'file']}")
            info = self.instruments.loc[sym].to_dict()
            frame = _model_frame(frames[sym])
            adjusted: list[tuple[str, float]] = []
            if split_adjust and str(info.get("asset_class", "")) in EQUITY_CLASSES:
                frame, adjusted = adjust_splits(frame)
                if adjusted:
                    log.info("%s: %d split(s) back-adjusted: %s", sym, len(adjusted), adjusted)
            values = candle_array(frame[[c for c in frame.columns if c in FEATURES]])
            stamps = pd.DatetimeIndex(frame["timestamps"])
            out.append(CorpusSeries(sym, values, stamps, info, adjusted))
        return out

    def load(self, flt: CorpusFilter | None = None, *,
             split_adjust: bool = True) -> list[CorpusSeries]:
        """Every instrument that passes ``flt``."""
        rows = self.select(flt)
        if rows.empty:
            raise CorpusError(f"no instrument in corpus {self.root} passes {flt}")
        return self.read(rows["symbol"], split_adjust=split_adjust)

    # -- the hold-out rules ----------------------------------------------------------------
    def evaluation_periods(self, underlying: str, *, exclude: str | None = None
                           ) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
        """The time every bar size of ``underlying`` evaluates on (but ``exclude``'s), as
        half-open ``[start, end)`` spans: from the start of its ``eval_from`` bar to the end of
        its ``last`` bar (``bar_extent``)."""
        rows = self.instruments[self.instruments["underlying"] == underlying]
        out = []
        for r in rows.itertuples():
            if r.symbol == exclude:
                continue
            first_lo, _ = bar_extent(pd.DatetimeIndex([r.eval_from]), str(r.frequency))
            _, last_hi = bar_extent(pd.DatetimeIndex([r.last]), str(r.frequency))
            out.append((first_lo[0], last_hi[0]))
        return out

    def training_mask(self, symbol: str, timestamps: pd.DatetimeIndex) -> np.ndarray:
        """(T,) bool: may training read this row? Both hold-out rules (module docstring): before
        the instrument's own ``eval_from``, and no overlap of the row's bar with another bar
        size's evaluation period."""
        info = self.instruments.loc[symbol]
        if info["split"] == HOLDOUT_INSTRUMENT:
            return np.zeros(len(timestamps), dtype=bool)
        allowed = np.asarray(timestamps < info["eval_from"])
        lo, hi = bar_extent(pd.DatetimeIndex(timestamps), str(info["frequency"]))
        for start, end in self.evaluation_periods(str(info["underlying"]), exclude=symbol):
            allowed &= ~np.asarray((lo < end) & (hi > start))
        return allowed


def bar_length(frequency: str) -> pd.Timedelta:
    """The time one bar of ``frequency`` (``1d``, ``1h``, ``5min``, ``1min``) spans."""
    try:  # pandas spells the day "D" ("d" is deprecated)
        length = pd.Timedelta(frequency[:-1] + "D" if frequency.endswith("d") else frequency)
    except ValueError as exc:
        raise CorpusError(f"frequency {frequency!r} is not a bar length such as 1d, 1h, "
                          "5min") from exc
    if length <= pd.Timedelta(0):
        raise CorpusError(f"frequency {frequency!r} is not a positive bar length")
    return length


def bar_extent(timestamps: pd.DatetimeIndex,
               frequency: str) -> tuple[pd.DatetimeIndex, pd.DatetimeIndex]:
    """(start, end) of the time the bars stamped ``timestamps`` may cover, end exclusive.

    A daily (or longer) bar is labelled with its date, so it covers ``[t, t + bar)``. An intraday
    label may mark a bar's start or its end (the corpus's sources do both), so the span
    ``[t - bar, t + bar)`` covers either reading."""
    length = bar_length(frequency)
    if length >= pd.Timedelta(days=1):
        return timestamps, timestamps + length
    return timestamps - length, timestamps + length


def training_segments(corpus: Corpus, series: Sequence[CorpusSeries],
                      min_rows: int) -> list[tuple[CorpusSeries, int, int]]:
    """Contiguous runs of training-allowed rows, as (series, start, end) with end exclusive,
    each at least ``min_rows`` long."""
    out = []
    for s in series:
        allowed = corpus.training_mask(s.symbol, s.timestamps)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], allowed.astype(np.int8), [0]])))
        for start, end in zip(edges[::2], edges[1::2]):
            if end - start >= min_rows:
                out.append((s, int(start), int(end)))
    return out
