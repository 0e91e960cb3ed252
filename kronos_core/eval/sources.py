"""Where evaluation series come from: files / stores (``--data``) or the corpus (``--corpus``).

With a corpus (``kronos_core.data.corpus``) every series carries its group (market, bar frequency),
its hold-out and its ``eval_from``:

* **time** hold-out: a ``train`` instrument, scored on its evaluation period (rows at or after
  ``eval_from``) only;
* **instrument** hold-out: a ``holdout_instrument`` series, scored on the same late period, so both
  hold-outs are judged on the same stretch of time.

Evaluation forecast origins (and so their truth rows) lie at or after ``eval_from``; calibration
windows end before it (``kronos calibrate`` fits on the earlier windows). The model's context may
reach back before ``eval_from``: it is the history a forecast is made from.

``--max-series-per-group N`` keeps, in each (market, frequency, hold-out), the N symbols first by
SHA-256 of the symbol (a fixed, data-independent order), so a cheap run looks at the same series
every time.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kronos_core.eval.data import Series

log = logging.getLogger(__name__)

TIME = "time"
INSTRUMENT = "instrument"
GIVEN = "given"  # series from files: no hold-out is known
HOLDOUT_OF_SPLIT = {"train": TIME, "holdout_instrument": INSTRUMENT}


@dataclass(frozen=True)
class SeriesInfo:
    """Where one evaluation series belongs."""

    market: str
    frequency: str
    holdout: str  # TIME, INSTRUMENT or GIVEN
    eval_from: pd.Timestamp | None = None  # corpus: first row of the evaluation period

    @property
    def group(self) -> tuple[str, str]:
        return (self.market, self.frequency)


@dataclass
class EvalSource:
    """The series to evaluate, with where each belongs."""

    series: list[Series]
    info: list[SeriesInfo]
    corpus: Path | None = None
    selection: dict = field(default_factory=dict)  # what was asked and taken (for the report)

    @property
    def eval_from(self) -> list[pd.Timestamp | None]:
        return [i.eval_from for i in self.info]


def symbol_hash(symbol: str) -> str:
    return hashlib.sha256(symbol.encode()).hexdigest()


def cap_per_group(rows: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """At most ``limit`` instrument rows per (market, frequency, split), chosen by symbol hash."""
    if limit is None:
        return rows
    if limit < 1:
        raise ValueError(f"--max-series-per-group must be >= 1, got {limit}")
    rows = rows.reset_index(drop=True)
    rows = rows.assign(_h=rows["symbol"].astype(str).map(symbol_hash))
    kept = rows.sort_values("_h").groupby(["market", "frequency", "split"], sort=False).head(limit)
    return kept.drop(columns="_h").sort_values(["market", "frequency", "symbol"])


def corpus_meta(info: dict) -> dict:
    """A corpus instrument's calendar (``calendar`` column: XNYS, XSHG, 24/7, 24/5, ...) and the
    zone of its stamps (``timezone``), under the store's metadata keys (``exchange``,
    ``timezone``), so its future timestamps are made as the service makes a stored symbol's."""
    meta = {}
    for key, column in (("exchange", "calendar"), ("timezone", "timezone")):
        value = info.get(column)
        if isinstance(value, str) and value.strip():
            meta[key] = value.strip()
    if "exchange" in meta and not known_calendar(meta["exchange"]):
        log.info("%s: calendar %r is not one the calendar library knows; its sessions are learned "
                 "from each window", info.get("symbol", "?"), meta["exchange"])
        del meta["exchange"]
    return meta


def known_calendar(name: str) -> bool:
    """Is ``name`` a calendar ``future_timestamps`` takes as ``exchange`` (24/7, 24/5 or one of
    the calendar library's venues)?"""
    from kronos_core.data.calendars import UnknownExchangeError, exchange_sessions
    from kronos_core.data.round_clock import round_clock_name

    if round_clock_name(name):
        return True
    try:
        exchange_sessions(name)
    except UnknownExchangeError:
        return False
    return True


def corpus_source(root: Path, split: str | None = None, markets=None, frequencies=None,
                  symbols=None, max_per_group: int | None = None) -> EvalSource:
    """The corpus series that pass the filters, with their groups and hold-outs."""
    from kronos_core.data.corpus import Corpus, CorpusError, CorpusFilter

    corpus = Corpus(root)
    flt = CorpusFilter(split, tuple(markets) if markets else None,
                       tuple(frequencies) if frequencies else None,
                       tuple(symbols) if symbols else None)
    rows = cap_per_group(corpus.select(flt), max_per_group)
    if rows.empty:
        raise CorpusError(f"no instrument in corpus {root} passes {flt}")
    loaded = corpus.read(rows["symbol"])
    series, info = [], []
    for cs in loaded:
        series.append(Series(cs.symbol, cs.values, cs.timestamps, f"{root}:{cs.symbol}",
                             corpus_meta(cs.info)))
        info.append(SeriesInfo(str(cs.info["market"]), str(cs.info["frequency"]),
                               HOLDOUT_OF_SPLIT[str(cs.info["split"])],
                               pd.Timestamp(cs.info["eval_from"])))
    selection = {"corpus": str(root), "split": split, "markets": markets,
                 "frequencies": frequencies,
                 "symbols": symbols, "max_series_per_group": max_per_group,
                 "series_taken": len(series), "series_passing_filter": int(len(corpus.select(flt)))}
    return EvalSource(series, info, Path(root), selection)


def file_source(series: list[Series], eval_from: dict | None = None) -> EvalSource:
    """Series from files or a store, grouped by their metadata: market (``market``, else the
    calendar: exchange or inferred ``sessions``, else ``-``) and bar frequency (``frequency``,
    else inferred). ``eval_from`` (symbol -> time, from ``--eval-from``): each series is split
    there as the corpus's are (a ``time`` hold-out); without it no hold-out is known."""
    from kronos_core.calibration.scope import series_frequency
    from kronos_core.data.timestamps import calendar_of

    info = []
    for s in series:
        market = s.meta.get("market") or calendar_of(s.meta) or "-"
        frequency = s.meta.get("frequency") or series_frequency(s.timestamps) or "?"
        t = None if eval_from is None else eval_from.get(s.name)
        info.append(SeriesInfo(str(market), str(frequency), GIVEN if t is None else TIME, t))
    selection = {"eval_from": None if eval_from is None else
                 {k: str(v) for k, v in eval_from.items()}}
    return EvalSource(series, info, selection=selection if eval_from else {})


def eval_from_times(text: str, names: list[str]) -> dict[str, pd.Timestamp]:
    """``--eval-from``: one time for every series, or a CSV file with columns ``symbol`` and
    ``eval_from`` (one row per series; every series must have one)."""
    from kronos_core.eval.data import DataError

    path = Path(text)
    if path.suffix.lower() == ".csv" or path.is_file():
        try:
            table = pd.read_csv(path, dtype={"symbol": str})
        except (OSError, ValueError) as exc:
            raise DataError(f"--eval-from {path}: {exc}") from exc
        missing_cols = {"symbol", "eval_from"} - set(table.columns)
        if missing_cols:
            raise DataError(f"--eval-from {path}: no column(s) {sorted(missing_cols)}; columns: "
                            f"{list(table.columns)}")
        by_symbol = dict(zip(table["symbol"], table["eval_from"]))
        missing = [n for n in names if n not in by_symbol]
        if missing:
            raise DataError(f"--eval-from {path}: no row for {missing[:5]}")
        pairs = [(n, by_symbol[n]) for n in names]
    else:
        pairs = [(n, text) for n in names]
    out = {}
    for name, value in pairs:
        try:
            out[name] = pd.Timestamp(value)
        except (ValueError, TypeError) as exc:
            raise DataError(f"--eval-from: {value!r} ({name}) is not a time") from exc
    return out


def load_source(args) -> EvalSource:
    """``--corpus`` (with its filters) or ``--data``; exactly one of them."""
    from kronos_core.eval.data import DataError
    from kronos_core.eval.runner import load_data

    corpus = getattr(args, "corpus", None)
    if corpus is not None and args.data:
        raise DataError("give either --data or --corpus, not both")
    if corpus is not None and getattr(args, "eval_from_text", None):
        raise DataError("--eval-from: only with --data (the corpus has its own eval_from)")
    if corpus is None:
        if not args.data:
            raise DataError("no series: give --data FILES/STORE or --corpus DIR")
        corpus_only = [f for f in ("split", "market", "frequency", "max_series_per_group")
                       if getattr(args, f, None) is not None]
        if corpus_only:
            flags = ", ".join("--" + f.replace("_", "-") for f in corpus_only)
            raise DataError(f"{flags}: only with --corpus")
        series = load_data(args)
        text = getattr(args, "eval_from_text", None)
        eval_from = eval_from_times(text, [x.name for x in series]) if text else None
        return file_source(series, eval_from)
    return corpus_source(corpus, args.split, args.market, args.frequency, args.symbols,
                         args.max_series_per_group)
