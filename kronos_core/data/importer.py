"""Import CSV / Parquet candle files into a ``KlineStore``.

An import is one store transaction (``store_txn.StoreTransaction``): every symbol it writes
is published together as one new store version, and by default only if every file and symbol
passed (``partial=True`` publishes those that passed). A symbol whose candles are already
stored as they are is not rewritten; an import that changes nothing publishes nothing.
Logging: one summary line per import at INFO, its warnings summarised once per import
(``import_summary``: one line per kind of warning, missing sessions as one count per symbol),
per-file detail at DEBUG. The exchange of a symbol whose suffix names one (``600000.SH``) is
recorded from the suffix (``symbol_exchange``) unless one is given.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from kronos_core.base.candles import CandleError
from kronos_core.data.fileformat import frame_arrays
from kronos_core.data.import_summary import GAP_PREFIX, import_counts, warning_summary
from kronos_core.data.reader import (  # noqa: F401  (read_table: re-exported)
    CSV_SUFFIXES,
    PARQUET_SUFFIXES,
    log_report,
    read_table,
)
from kronos_core.data.store import KlineStore, StoreError, validate_symbol
from kronos_core.data.store_merge import CandleArrays, SymbolUpdate
from kronos_core.data.store_txn import StoreTransaction
from kronos_core.data.symbol_exchange import exchange_from_symbol
from kronos_core.data.validate import (
    SYMBOL_NAMES,
    Repairs,
    ValidationReport,
    validate_candles,
)

log = logging.getLogger(__name__)

@dataclass
class ImportOutcome:
    file: str
    symbol: str | None
    rows_in: int = 0
    frequency: str | None = None
    rows_written: int = 0
    rows_total: int = 0
    first: str | None = None
    last: str | None = None
    error: str | None = None
    repairs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    changed: bool = False  # whether the symbol's file is rewritten (False: already stored)
    held_back: bool = False  # valid with new candles, not published (an all-or-nothing refusal)

    @property
    def ok(self) -> bool:
        return self.error is None


def store_symbol(symbol: str) -> str:
    """The store's case rule: symbols are upper case (tickers' convention). Import upper-cases
    every symbol it writes (file name, ``--symbol``, ``--symbol-column``); reads are exact and
    an unknown symbol whose other case is stored gets a "did you mean" hint."""
    return symbol.upper()


def gap_warning(frame: pd.DataFrame | CandleArrays, exchange: str | None) -> str | None:
    """The ``missing_sessions`` message of an imported frame's stamps, when the symbol's
    exchange is known and the frame skips some of its sessions; else None."""
    if not exchange:
        return None
    stamps = (frame.ts.view("datetime64[ns]") if isinstance(frame, CandleArrays)
              else frame["timestamps"].to_numpy())
    if len(stamps) < 2:
        return None
    from kronos_core.data.calendars import UnknownExchangeError
    from kronos_core.data.gaps import missing_sessions

    try:
        gaps = missing_sessions(stamps, exchange)
    except UnknownExchangeError:
        return None
    return None if gaps is None else f"{GAP_PREFIX}{gaps.message()}"


def read_symbol_map(path: str | os.PathLike) -> dict[str, str]:
    """A symbol map file: CSV with a header row and two columns, the vendor's symbol and the
    store's (e.g. ``^GSPC,GSPC``). Raises ``CandleError`` naming the file and row."""
    out: dict[str, str] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise CandleError(f"--symbol-map {path}: cannot read: {exc}") from None
    for i, row in enumerate(rows[1:], start=1):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        if len(cells) < 2 or not cells[0] or not cells[1]:
            raise CandleError(
                f"--symbol-map {path}: row {i}: expected 'vendor symbol,store symbol', got {row}"
            )
        if cells[0] in out and out[cells[0]] != cells[1]:
            raise CandleError(
                f"--symbol-map {path}: row {i}: {cells[0]!r} is mapped twice "
                f"({out[cells[0]]!r}, {cells[1]!r})"
            )
        out[cells[0]] = cells[1]
    if not out:
        raise CandleError(f"--symbol-map {path}: no rows after the header")
    return out


def map_symbol(symbol: str, symbol_map: Mapping[str, str] | None) -> str:
    """``symbol`` through ``symbol_map`` (exact match first, then any case); unmapped: as is."""
    if not symbol_map:
        return symbol
    if symbol in symbol_map:
        return symbol_map[symbol]
    folded = {k.upper(): v for k, v in symbol_map.items()}
    return folded.get(symbol.upper(), symbol)


def _symbol_from_file(path: Path) -> str:
    name = path.name
    for suffix in sorted(CSV_SUFFIXES + PARQUET_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def import_frame(
    store: KlineStore | StoreTransaction,
    df: pd.DataFrame | CandleArrays,
    symbol: str,
    *,
    source_name: str = "<frame>",
    frequency: str | None = None,
    timezone: str | None = None,
    source: str | None = None,
    time_column: str | None = None,
    repairs: Repairs = Repairs(),
    on_overlap: str = "error",
    extra_metadata: dict | None = None,
    row_numbers=None,
    column_map: Mapping[str, str] | None = None,
    symbol_map: Mapping[str, str] | None = None,
    symbol_metadata: Mapping[str, dict] | None = None,
    suffix_exchanges: Mapping[str, str | None] | None = None,
    log_warnings: bool = True,
    validated: tuple[pd.DataFrame | CandleArrays, str | None, ValidationReport] | None = None,
) -> ImportOutcome:
    """Validate one symbol's candles and merge them into the store (atomically), under its
    mapped (``symbol_map``), upper-case name (``store_symbol``). ``store``: a ``KlineStore``
    (the write is its own store version) or an open ``StoreTransaction`` (published with the
    rest of it). A failure is returned in the outcome (its message names the file and symbol
    once), not logged; warnings (unused columns, a renamed symbol, sessions of its exchange
    the candles skip) are kept in the outcome, and logged (``log_warnings``; else at DEBUG:
    ``import_files`` summarises them). Without an ``exchange`` in ``extra_metadata``, a symbol
    whose suffix names one (``symbol_exchange.exchange_from_symbol`` with ``suffix_exchanges``
    as overrides) gets it recorded: ``600000.SH`` follows the XSHG calendar. ``validated``:
    ``df`` already checked (``validate_candles``' result), e.g. with the rest of its file.
    ``symbol_metadata``: metadata per store symbol (``kronos_core.data.symbol_details``), over
    ``extra_metadata``."""
    given = symbol
    if isinstance(symbol, str):
        symbol = store_symbol(map_symbol(symbol, symbol_map))
    rows_in = len(df.ts) if isinstance(df, CandleArrays) else len(df)
    out = ImportOutcome(file=source_name, symbol=symbol, rows_in=rows_in)
    try:
        validate_symbol(symbol)
        if validated is not None:
            frame, tz, report = validated
        elif isinstance(df, CandleArrays):
            raise TypeError("candle arrays are imported with validated=")
        else:
            frame, tz, report = validate_candles(
                df,
                source=f"{source_name} [{symbol}]",
                time_column=time_column,
                timezone=timezone,
                repairs=repairs,
                row_numbers=row_numbers,
                column_map=column_map,
            )
        if log_warnings:
            log_report(report, f"{source_name} [{symbol}]")
        extra_metadata = _with_suffix_exchange(symbol, extra_metadata, suffix_exchanges)
        kw: dict[str, Any] = dict(
            frequency=frequency,
            timezone=tz,
            source=source or f"imported from {Path(source_name).name}",
            on_overlap=on_overlap,
            extra_metadata={**(extra_metadata or {}), **(symbol_metadata or {}).get(symbol, {})}
            or None,
            missing=report.filled,
        )
        if isinstance(store, StoreTransaction):
            update = store.update(symbol, frame, **kw)
        else:
            with store.transaction() as tx:
                update = tx.update(symbol, frame, **kw)
        _record(out, update, given, frame, report, log_warnings)
    except (CandleError, StoreError, ValueError, OSError) as exc:
        msg = str(exc)
        out.error = msg if msg.startswith(source_name) else f"{source_name} [{symbol}]: {msg}"
    return out


def _record(out: ImportOutcome, update: SymbolUpdate, given: str,
            frame: pd.DataFrame | CandleArrays, report: ValidationReport,
            log_warnings: bool) -> None:
    """An outcome's figures and warnings from a staged write (``given``: the symbol as the
    file named it)."""
    meta, symbol = update.meta, str(out.symbol)
    out.changed = update.changed
    out.frequency = meta["frequency"]
    out.rows_written = meta["rows"] - update.rows_before
    out.rows_total = meta["rows"]
    out.first, out.last = meta["first"], meta["last"]
    out.repairs = tuple(report.repairs)
    extra = []
    if symbol != given and store_symbol(given) == symbol:
        extra.append(f"symbol {given!r} stored as {symbol!r} (store symbols are upper case)")
    gap = gap_warning(frame, meta.get("exchange"))
    if gap is not None:
        extra.append(gap)
    out.warnings = tuple(report.repairs) + tuple(report.warnings) + tuple(extra)
    for line in out.warnings if not log_warnings else extra:
        log.log(logging.WARNING if log_warnings else logging.DEBUG,
                "%s [%s]: %s", out.file, symbol, line)


def _with_suffix_exchange(
    symbol: str, extra_metadata: dict | None, overrides: Mapping[str, str | None] | None
) -> dict | None:
    """``extra_metadata`` with the exchange ``symbol``'s suffix names, unless it names one."""
    if extra_metadata and extra_metadata.get("exchange"):
        return extra_metadata
    mic = exchange_from_symbol(symbol, overrides)
    if mic is None:
        return extra_metadata
    return {**(extra_metadata or {}), "exchange": mic}


def _drop_symbol_column(df: pd.DataFrame, path: Path, symbol: str,
                        symbol_map: Mapping[str, str] | None) -> tuple[pd.DataFrame, str | None]:
    """A single-symbol file's own symbol column (``symbol``, ``ts_code``...; the first found)
    checked and dropped: one value is the file's symbol (a warning when it is another one);
    several values are refused (rows of several symbols are not one series). Returns the
    frame and a warning, if any."""
    by_lower = {str(c).strip().lower(): c for c in df.columns}
    col = next((by_lower[n] for n in SYMBOL_NAMES if n in by_lower), None)
    if col is None:
        return df, None
    values = sorted(df[col].dropna().astype(str).str.strip().unique())
    if len(values) > 1:
        raise CandleError(
            f"{path}: column {str(col)!r} holds {len(values)} symbols ({', '.join(values[:5])}"
            f"{', ...' if len(values) > 5 else ''}); import it with --symbol-column {str(col)!r} "
            "(one series per symbol)"
        )
    note = None
    if values and store_symbol(map_symbol(values[0], symbol_map)) != symbol:
        note = (f"column {str(col)!r} says {values[0]!r}, stored as {symbol!r} (the file's name; "
                f"--symbol-column {str(col)!r} stores the column's)")
    return df.drop(columns=[col]), note


def _import_grouped(
    store: StoreTransaction, df: pd.DataFrame, path: Path, symbol_column: str, progress: bool,
    kw: dict,
) -> list[ImportOutcome]:
    """Import one file holding many symbols, one outcome per value of ``symbol_column``
    (matched in any case); rows keep the file's data row numbers."""
    df.columns = [str(c).strip() for c in df.columns]
    by_lower = {c.lower(): c for c in df.columns}
    symbol_column = by_lower.get(symbol_column.strip().lower(), symbol_column)
    if symbol_column not in df.columns:
        return [ImportOutcome(
            file=str(path), symbol=None,
            error=f"{path}: symbol column {symbol_column!r} not found; columns: {list(df.columns)}",
        )]
    df = df.reset_index(drop=True)
    fast = _import_validated_together(store, df, path, symbol_column, kw)
    if fast is not None:
        return fast
    groups = list(df.groupby(df[symbol_column].astype(str), sort=True))
    inner = tqdm(
        groups, desc=path.name, unit="symbol", leave=False, disable=not progress or len(groups) < 2
    )
    outcomes = []
    for sym, part in inner:
        rows = part.index.to_numpy() + 1  # the file's data rows
        part = part.drop(columns=[symbol_column]).reset_index(drop=True)
        outcomes.append(import_frame(store, part, sym, row_numbers=rows, **kw))
    return outcomes


def _import_validated_together(
    store: StoreTransaction, df: pd.DataFrame, path: Path, symbol_column: str, kw: dict,
) -> list[ImportOutcome] | None:
    """A many-symbol file validated in one pass (``validate_candles(groups=)``: a day file of
    1,000 symbols is one parse, not 1,000), then staged symbol by symbol. None when the file
    has a problem or needed a repair: the caller then validates symbol by symbol, so that each
    symbol's outcome names its own problems and rows."""
    codes, uniques = pd.factorize(df[symbol_column].astype(str), sort=True)
    names = [str(u) for u in uniques]
    try:
        frame, tz, report = validate_candles(
            df.drop(columns=[symbol_column]), source=str(path), time_column=kw["time_column"],
            timezone=kw["timezone"], repairs=kw["repairs"], column_map=kw["column_map"],
            groups=codes,
        )
    except CandleError:
        return None
    if report.repairs or report.groups is None:
        return None
    ts, values, aware = frame_arrays(frame)  # (n,) int64 ns, (n, 6): no frame per symbol
    starts = np.flatnonzero(np.diff(report.groups)) + 1
    outcomes = []
    for a, b in zip(np.r_[0, starts], np.r_[starts, len(frame)]):
        part = CandleArrays(ts[a:b], values[a:b], aware)
        sym = names[report.groups[a]]
        outcomes.append(import_frame(store, part, sym, validated=(part, tz, report), **kw))
    return outcomes


def import_files(
    files: Sequence[str | os.PathLike],
    store_root: str | os.PathLike,
    *,
    symbol: str | None = None,
    symbol_column: str | None = None,
    frequency: str | None = None,
    timezone: str | None = None,
    source: str | None = None,
    time_column: str | None = None,
    repairs: Repairs = Repairs(),
    on_overlap: str = "error",
    extra_metadata: dict | None = None,
    progress: bool = True,
    compact: bool | None = None,
    column_map: Mapping[str, str] | None = None,
    symbol_map: Mapping[str, str] | None = None,
    encoding: str | None = None,
    partial: bool = False,
    fsync: bool = True,
    symbol_metadata: Mapping[str, dict] | None = None,
    suffix_exchanges: Mapping[str, str | None] | None = None,
) -> list[ImportOutcome]:
    """Import files into the store at ``store_root``, as one store transaction; one outcome
    per (file, symbol).

    The symbol is ``symbol``, else each value of ``symbol_column``, else the file
    name without its suffix, mapped through ``symbol_map`` (vendor -> store symbol). A
    failing file or symbol is reported in its outcome; the others are checked too, but
    nothing is published unless every one passed (``partial=True``: publish those that
    passed). ``encoding``: of CSV files (default UTF-8). ``compact``: then rewrite the read
    snapshot of every frequency written to (``KlineStore.compact``; True: always, False: never,
    None: ``worth_compacting``: not for a small append, whose cost would be the whole history's);
    without it the imported symbols are read from their files (correct, slower to open) until
    the next compaction.
    Without an exchange in ``extra_metadata`` each symbol's suffix may name its own
    (``suffix_exchanges``: overrides of ``symbol_exchange.SUFFIX_EXCHANGES``), so one import
    puts a mixed ``.SH``/``.SZ`` folder or day file on the right calendars. Warnings are
    summarised once per import (``import_summary``). ``symbol_metadata``: metadata per store
    symbol (its price-limit details, ``kronos_core.data.symbol_details``), added to
    ``extra_metadata`` for that symbol."""
    if symbol is not None and symbol_column is not None:
        raise ValueError("give either symbol or symbol_column, not both")
    store = KlineStore(store_root)
    outcomes: list[ImportOutcome] = []
    with store.transaction(fsync=fsync) as tx:
        _import_all(tx, files, outcomes, progress, encoding, symbol, symbol_column, dict(
            frequency=frequency, timezone=timezone, source=source, time_column=time_column,
            repairs=repairs, on_overlap=on_overlap, extra_metadata=extra_metadata,
            column_map=column_map, symbol_map=symbol_map, symbol_metadata=symbol_metadata,
            suffix_exchanges=suffix_exchanges, log_warnings=False,
        ))
        if not partial and any(not o.ok for o in outcomes):
            tx.abort()
            for o in outcomes:
                o.held_back, o.changed = o.ok and o.changed, False
    version = tx.published.version if tx.published is not None else store.version
    changed = [o for o in outcomes if o.ok and o.changed]
    failed = sum(not o.ok for o in outcomes)
    for line in warning_summary(outcomes):
        log.warning("import into %s: %s", store_root, line)
    log.info(
        "import into %s: %s; store version %d%s", store_root,
        import_counts(outcomes, len(files)).line(), version,
        "" if tx.published is not None else " (nothing published)",
    )
    if compact is not False and (tx.published is not None or not failed):
        _compact_after(store, outcomes, changed, compact)
    return outcomes


def _compact_after(store: KlineStore, outcomes: list[ImportOutcome],
                   changed: list[ImportOutcome], compact: bool | None) -> None:
    """Rewrite the read snapshots an import calls for (``import_files``' ``compact``)."""
    store_root = store.root
    # the frequencies written to, and those whose snapshot predates the published version
    # (an import with --no-compact before): an identical re-import otherwise writes nothing
    added: dict[str, int] = {}
    for o in changed:
        if o.frequency:
            added[o.frequency] = added.get(o.frequency, 0) + o.rows_written
    freqs = set(added)
    freqs |= {f for f in {o.frequency for o in outcomes if o.ok and o.frequency}
              if f is not None and _snapshot_stale(store, f)}
    for freq in sorted(freqs):
        if compact is None and freq in added and not worth_compacting(
            store, freq, added[freq]
        ):
            log.debug("import into %s: the %s read snapshot is left as it was (a small append; "
                      "kronos store compact rewrites it)", store_root, freq)
            continue
        try:
            store.compact(freq)
        except OSError as exc:  # the import stands; reads use the files meanwhile
            log.warning("import: cannot write the %s snapshot: %s", freq, exc)


AUTO_COMPACT_SHARE = 0.05


def worth_compacting(store: KlineStore, frequency: str, added: int) -> bool:
    """Whether an import that added ``added`` candles to ``frequency`` rewrites its read
    snapshot by default: when there is none (or it is unreadable), or the import added at least
    ``AUTO_COMPACT_SHARE`` of the candles it holds. A day's append (1,000 candles to 2.5
    million) is not worth it: the rewrite is the whole history (1.7 s for 2.5 M candles here,
    longer than the append itself), and only a fresh reader's first read gains from it (about
    25 ms instead of 150 ms for 1,000 symbols); ``kronos store compact`` does it when wanted."""
    import json

    import pyarrow as pa

    from kronos_core.data.snapshot import SNAPSHOT_META_KEY, SNAPSHOT_NAME

    try:
        with pa.memory_map(str(store.root / frequency / SNAPSHOT_NAME)) as source:
            meta = pa.ipc.open_file(source).schema.metadata or {}
        rows = int(json.loads(meta[SNAPSHOT_META_KEY])["rows"])
    except (OSError, pa.ArrowException, KeyError, ValueError, TypeError):
        return True
    return added >= AUTO_COMPACT_SHARE * rows


def _snapshot_stale(store: KlineStore, frequency: str) -> bool:
    """Whether ``frequency``'s read snapshot is older than the published version (or absent)."""
    from kronos_core.data.snapshot import SNAPSHOT_NAME
    from kronos_core.data.versions import MANIFEST_NAME

    try:
        published = (store.root / MANIFEST_NAME).stat().st_mtime_ns
    except FileNotFoundError:
        return False
    try:
        return (store.root / frequency / SNAPSHOT_NAME).stat().st_mtime_ns < published
    except FileNotFoundError:
        return True


def _import_all(tx: StoreTransaction, files: Sequence[str | os.PathLike],
                outcomes: list[ImportOutcome], progress: bool, encoding: str | None,
                symbol: str | None, symbol_column: str | None, options: dict) -> None:
    """Stage every file's symbols in ``tx``, appending their outcomes."""
    bar = tqdm(files, desc="import", unit="file", disable=not progress or len(files) < 2)
    for f in bar:
        path = Path(f)
        try:
            df = read_table(path, encoding=encoding)
        except CandleError as exc:  # read_table's own errors name the file already
            outcomes.append(ImportOutcome(file=str(path), symbol=symbol, error=str(exc)))
            continue
        except (OSError, ValueError) as exc:  # the parser's: say which file
            outcomes.append(
                ImportOutcome(file=str(path), symbol=symbol, error=f"{path}: cannot read: {exc}")
            )
            continue
        kw: dict[str, Any] = dict(source_name=str(path), **options)
        if symbol_column is not None:
            outcomes += _import_grouped(tx, df, path, symbol_column, progress, kw)
            continue
        name = symbol or _symbol_from_file(path)
        try:
            df, note = _drop_symbol_column(
                df, path, store_symbol(map_symbol(name, options["symbol_map"])),
                options["symbol_map"],
            )
        except CandleError as exc:
            outcomes.append(ImportOutcome(file=str(path), symbol=name, error=str(exc)))
            continue
        outcome = import_frame(tx, df, name, **kw)
        if note is not None and outcome.ok:
            outcome.warnings += (note,)
        outcomes.append(outcome)
