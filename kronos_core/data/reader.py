"""One candle-file reader for every command (``kronos import``, ``kronos forecast``, ...).

Flags (``add_reader_arguments``): ``--time-column COL``, ``--column NAME=COL`` (repeatable:
use the file's ``COL`` as our ``NAME``, e.g. ``--column volume=Vol``) and the repair flags
``--drop-nan --drop-duplicates --sort --fix-high-low --clip-negative --drop-nonpositive
--repair`` (all). Column names
match in any case (``Date``, ``OPEN``). Every problem of a file is reported in one error,
with 1-based data row numbers (row 1 is the first row after the header; the file line is
row + 1); every column left unused is named in a warning; each message is given once.

Tables out (``write_table``): ``.csv``, ``.parquet``, ``.json``, and ``.xlsx`` when
``openpyxl`` is installed; anything else is refused before any work is done
(``check_output_path``).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kronos_core.base.candles import FEATURES, CandleError
from kronos_core.data.validate import Repairs, ValidationReport, validate_candles

log = logging.getLogger(__name__)

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")
OUTPUT_SUFFIXES = (".csv", ".parquet", ".json", ".xlsx")
MAPPABLE = ("timestamps", *FEATURES)


@dataclass(frozen=True)
class ReadOptions:
    """How to read a candle file: the time column (None: timestamps, timestamp, datetime,
    date or time), a column map (our name -> the file's column), repairs, and the zone of
    tz-aware stamps."""

    time_column: str | None = None
    column_map: Mapping[str, str] = field(default_factory=dict)
    repairs: Repairs = Repairs()
    timezone: str | None = None
    encoding: str | None = None  # of CSV files (None: UTF-8)


def read_table(path: str | os.PathLike, encoding: str | None = None) -> pd.DataFrame:
    """Read a CSV (optionally compressed, or tab-separated .tsv) or Parquet file. ``encoding``:
    of a CSV file (default UTF-8; e.g. gbk, latin-1). A CSV that is not in its encoding is a
    ``CandleError`` naming the file, the encoding and ``--encoding``."""
    name = str(path).lower()
    if name.endswith(PARQUET_SUFFIXES):
        return pd.read_parquet(path)
    if name.endswith(CSV_SUFFIXES):
        try:
            return pd.read_csv(path, sep="\t" if name.endswith(".tsv") else ",",
                               encoding=encoding or "utf-8")
        except UnicodeDecodeError as exc:
            raise CandleError(
                f"{path}: not {encoding or 'UTF-8'} text ({exc.reason} at byte {exc.start}); "
                "name the file's encoding with --encoding (e.g. gbk, gb18030, latin-1)"
            ) from None
        except LookupError as exc:  # an unknown encoding name
            raise CandleError(f"{path}: --encoding {encoding!r}: {exc}") from None
    raise CandleError(f"{path}: unknown file type; expected {CSV_SUFFIXES + PARQUET_SUFFIXES}")


def parse_column_map(items: list[str] | None) -> dict[str, str]:
    """``["volume=Vol", "close=Adj Close"]`` -> ``{"volume": "Vol", "close": "Adj Close"}``."""
    out: dict[str, str] = {}
    for item in items or []:
        ours, sep, theirs = item.partition("=")
        ours = ours.strip().lower()
        if not sep or not theirs.strip() or ours not in MAPPABLE:
            raise CandleError(
                f"--column {item!r}: use NAME=COLUMN with NAME one of {list(MAPPABLE)}, e.g. "
                "volume=Vol"
            )
        out[ours] = theirs.strip()
    return out


def log_report(report: ValidationReport, prefix: str) -> None:
    """Log a validation's repairs and unused columns (warnings) and notes, once each."""
    for line in report.repairs + report.warnings:
        log.warning("%s: %s", prefix, line)
    for line in report.notes:  # the model's rules, the same for every file: detail
        log.debug("%s: %s", prefix, line)


def read_candles(
    path: str | os.PathLike, options: ReadOptions = ReadOptions()
) -> tuple[pd.DataFrame, str | None, ValidationReport]:
    """Read and validate one file of one symbol: ``(frame, timezone, report)`` as
    ``validate_candles`` returns them; raises ``CandleError`` naming the file."""
    try:
        df = read_table(path, options.encoding)
    except CandleError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CandleError(f"{path}: cannot read: {exc}") from None
    frame, tz, report = validate_candles(
        df, source=str(path), time_column=options.time_column, timezone=options.timezone,
        repairs=options.repairs, column_map=options.column_map,
    )
    log_report(report, str(path))
    return frame, tz, report


# ----------------------------------------------------------------------------- flags


def add_reader_arguments(parser: argparse.ArgumentParser, repair_all: str = "--repair") -> None:
    """The reading flags every command that reads candle files shares. ``repair_all``: the
    spelling of the all-repairs flag (``kronos forecast`` uses ``--repair-input``, its
    ``--repair`` being about the forecast candles)."""
    parser.add_argument(
        "--time-column", metavar="COL",
        help="time column (default: timestamps, timestamp, datetime, date or time; any case)",
    )
    parser.add_argument(
        "--encoding", metavar="NAME",
        help="text encoding of CSV files (default utf-8; e.g. gbk, gb18030, latin-1)",
    )
    parser.add_argument(
        "--column", action="append", metavar="NAME=COL", default=[],
        help="use the file's column COL as NAME (timestamps, open, high, low, close, volume, "
        "amount); repeatable, e.g. --column volume=Vol --column close='Adj Close'",
    )
    rep = parser.add_argument_group(
        "repairs (off by default: problems are refused with their row numbers)"
    )
    rep.add_argument(
        repair_all, dest="repair_input", action="store_true", help="all of the repairs below"
    )
    rep.add_argument(
        "--drop-nan", action="store_true", help="drop rows with missing/unparseable times or values"
    )
    rep.add_argument(
        "--drop-duplicates", action="store_true",
        help="keep the last row of each duplicated timestamp",
    )
    rep.add_argument("--sort", action="store_true", help="sort rows by time")
    rep.add_argument(
        "--fix-high-low", action="store_true", help="widen high/low to cover open and close"
    )
    rep.add_argument("--clip-negative", action="store_true", help="set negative volume/amount to 0")
    rep.add_argument(
        "--drop-nonpositive", action="store_true",
        help="drop rows with a zero or negative open, high, low or close",
    )


def read_options_from_args(args: argparse.Namespace, timezone: str | None = None) -> ReadOptions:
    """``ReadOptions`` from the flags of ``add_reader_arguments``; raises ``CandleError`` for
    a malformed ``--column``."""
    repairs = Repairs.all() if args.repair_input else Repairs(
        drop_nan=args.drop_nan, drop_duplicates=args.drop_duplicates, sort=args.sort,
        fix_high_low=args.fix_high_low, clip_negative=args.clip_negative,
        drop_nonpositive=getattr(args, "drop_nonpositive", False),
    )
    return ReadOptions(args.time_column, parse_column_map(args.column), repairs, timezone,
                       getattr(args, "encoding", None))


# ----------------------------------------------------------------------------- output


def _has_openpyxl() -> bool:
    try:
        import openpyxl  # noqa: F401
    except ImportError:
        return False
    return True


def check_output_path(path: str | os.PathLike) -> None:
    """Refuse an output path ``write_table`` cannot write, before any work is done."""
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise CandleError(
            f"--out {path}: unknown file type {suffix!r}; use one of {list(OUTPUT_SUFFIXES)}"
        )
    if suffix == ".xlsx" and not _has_openpyxl():
        raise CandleError(
            f"--out {path}: writing .xlsx needs openpyxl (pip install openpyxl); or use .csv, "
            ".parquet or .json"
        )


def write_table(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``table`` (index: timestamps) as .csv, .parquet, .json (records) or .xlsx."""
    check_output_path(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        table.to_parquet(path)
    elif suffix == ".json":
        table.reset_index().to_json(path, orient="records", date_format="iso", indent=1)
    elif suffix == ".xlsx":
        table.to_excel(path)
    else:
        table.to_csv(path)
