"""``kronos import FILE... --store DIR``: validate CSV/Parquet candles and add them to a store."""

from __future__ import annotations

import argparse
import sys

from kronos_core.base.candles import CandleError
from kronos_core.data.import_summary import import_counts
from kronos_core.data.importer import import_files, read_symbol_map
from kronos_core.data.reader import add_reader_arguments, read_options_from_args
from kronos_core.data.store import KlineStore
from kronos_core.data.symbol_details import flag_details, merge_details, read_symbol_details

MAX_LINES = 50  # a line per symbol up to this many (more: the summary; kronos -v logs each)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="CSV (.csv, .csv.gz, .tsv) or Parquet files"
    )
    parser.add_argument(
        "--store", required=True, metavar="DIR", help="store root (created if missing)"
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--symbol", help="symbol for all rows (default: the file name without suffix)")
    who.add_argument("--symbol-column", metavar="COL", help="column holding each row's symbol")
    parser.add_argument(
        "--symbol-map", metavar="FILE",
        help="CSV with a header and two columns, vendor symbol -> store symbol (e.g. ^GSPC,GSPC); "
        "applied to --symbol, --symbol-column values and file names. Optional further columns, "
        "by header, for daily price limits: st (yes/no), board (main, star, chinext, bse, none), "
        "listed (first trading day, YYYY-MM-DD)",
    )
    parser.add_argument(
        "--frequency", help="frequency directory, e.g. 5min, 1h, 1d (default: inferred)"
    )
    parser.add_argument(
        "--timezone", help="time zone of the stamps (IANA name), kept in the metadata"
    )
    parser.add_argument(
        "--session-timezone",
        help="clock the trading sessions follow, if not --timezone (e.g. America/New_York for FX "
             "stamped in UTC)",
    )
    parser.add_argument(
        "--exchange",
        metavar="MIC",
        help="the venue's ISO MIC (XNYS, XNAS, XSHG, XHKG...) or 24/7 (crypto) or 24/5 (spot FX), "
        "kept in the metadata: future timestamps then follow its calendar (holidays, lunch "
        "breaks, early closes). Without it a series that trades every bar of every day is "
        "recorded as 'sessions: 24/7'",
    )
    parser.add_argument(
        "--suffix-exchange", action="append", metavar="SUFFIX=MIC",
        help="without --exchange, a symbol's suffix names its exchange: .SH/.SS -> XSHG, "
        ".SZ -> XSHE, .BJ -> BJSE (Shanghai's calendar); this adds or changes one (.BJ=XSHG; "
        ".BJ=none: none from .BJ); repeatable",
    )
    parser.add_argument(
        "--no-suffix-exchange", action="store_true",
        help="take no exchange from symbol suffixes",
    )
    parser.add_argument(
        "--market", help="the market the series belong to (crypto, CN, US, FX...), kept in the "
        "metadata: kronos eval groups a store's series by it"
    )
    parser.add_argument(
        "--source", help="where the data comes from (metadata; default: the file name)"
    )
    limits = parser.add_argument_group(
        "daily price limits", "what a Shanghai, Shenzhen or Beijing stock's limit depends on, kept "
        "in its metadata (default: its board from its code and exchange, ST status unknown; "
        "docs/price-limits.md)")
    limits.add_argument("--st", nargs="+", action="extend", default=[], metavar="SYMBOL",
                        help="store symbols under special treatment (ST, *ST): the tighter limit")
    limits.add_argument("--not-st", nargs="+", action="extend", default=[], metavar="SYMBOL",
                        help="store symbols known not to be under special treatment (e.g. "
                        "after their ST status was lifted)")
    limits.add_argument("--board", help="the board of every imported symbol: main, star, chinext, "
                        "bse, or none (no daily limit); default: from each code")
    parser.add_argument(
        "--on-overlap",
        choices=("error", "keep", "replace"),
        default="error",
        help="new candles at stored timestamps with different values: refuse (default), keep "
             "stored, replace",
    )
    add_reader_arguments(parser)
    parser.add_argument(
        "--partial", action="store_true",
        help="publish the symbols that passed even if others failed (default: an import is "
        "all-or-nothing, a failure publishes nothing)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    compact = parser.add_mutually_exclusive_group()
    compact.add_argument(
        "--no-compact",
        action="store_true",
        help="do not rewrite the frequency's read snapshot afterwards (run it later: "
        "kronos store compact DIR); reads stay correct, first reads of new data are slower",
    )
    compact.add_argument(
        "--compact", action="store_true",
        help="rewrite the read snapshot even after a small append (by default it is rewritten "
        "when there is none or the import added at least 5%% of its candles)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        options = read_options_from_args(args)
        symbol_map = read_symbol_map(args.symbol_map) if args.symbol_map else None
        from_map = read_symbol_details(args.symbol_map) if args.symbol_map else {}
        from_flags, common = flag_details(args.st, args.not_st, args.board)
        suffixes = _suffix_exchanges(args)
    except (CandleError, ValueError) as exc:
        print(f"kronos import: {exc}", file=sys.stderr)
        return 2
    extra = {}
    if args.session_timezone:
        extra["session_timezone"] = args.session_timezone
    if args.market:
        extra["market"] = args.market
    extra.update(common)
    details = merge_details(from_map, from_flags)  # the flags win over the map's cells
    if args.exchange:
        from kronos_core.data.calendars import UnknownExchangeError, exchange_sessions

        try:
            extra["exchange"] = exchange_sessions(args.exchange).name
        except UnknownExchangeError as exc:
            print(f"kronos import: {exc}", file=sys.stderr)
            return 2
    outcomes = import_files(
        args.files,
        args.store,
        symbol=args.symbol,
        symbol_column=args.symbol_column,
        frequency=args.frequency,
        timezone=args.timezone,
        source=args.source,
        time_column=options.time_column,
        column_map=options.column_map,
        symbol_map=symbol_map,
        encoding=options.encoding,
        partial=args.partial,
        repairs=options.repairs,
        on_overlap=args.on_overlap,
        extra_metadata=extra or None,
        progress=not args.no_progress,
        compact=False if args.no_compact else True if args.compact else None,
        suffix_exchanges=suffixes,
        symbol_metadata=details or None,
    )
    failed = [o for o in outcomes if not o.ok]
    published = args.partial or not failed
    unknown = sorted(set(from_flags) - {o.symbol for o in outcomes})
    if unknown:
        print(f"warning: --st/--not-st name {', '.join(unknown)}, which this import does not "
              "hold (store symbols, after --symbol-map)", file=sys.stderr)
    for o in outcomes if len(outcomes) <= MAX_LINES else ():
        if o.ok and published:
            fixed = f", {len(o.repairs)} repair(s)" if o.repairs else ""
            same = "" if o.changed else " (unchanged)"
            print(
                f"{o.symbol}: +{o.rows_written} candles -> {o.rows_total} ({o.first} .. {o.last}) "
                f"from {o.file}{fixed}{same}"
            )
    for o in failed:
        print(f"error: {o.error}", file=sys.stderr)
    version = KlineStore(args.store).version
    counts = import_counts(outcomes, len(args.files))
    if published:
        print(f"imported into {args.store}: {counts.line()} (store version {version})")
    else:
        print(f"nothing imported into {args.store}: {counts.line()}; store version {version} "
              "unchanged", file=sys.stderr)
    return 1 if failed else 0


def _suffix_exchanges(args: argparse.Namespace) -> dict[str, str | None] | None:
    """The suffix -> exchange overrides of ``--suffix-exchange`` / ``--no-suffix-exchange``
    (checked: each MIC must name a calendar)."""
    from kronos_core.data.calendars import exchange_sessions
    from kronos_core.data.symbol_exchange import SUFFIX_EXCHANGES, parse_suffix_overrides

    if args.no_suffix_exchange:
        return {suffix: None for suffix in SUFFIX_EXCHANGES}
    overrides = parse_suffix_overrides(args.suffix_exchange)
    for mic in overrides.values():
        if mic is not None:
            exchange_sessions(mic)  # UnknownExchangeError (a ValueError) names the fix
    return overrides or None
