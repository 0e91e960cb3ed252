"""``kronos timestamps-holdout``: how often ``future_timestamps`` gets the real next dates.

Every cut of each series (``--stride 1``): the ``--lookback`` timestamps before the cut are the
history, the next ``--horizons`` real timestamps the truth. Nothing is read from the future:
no holiday list, no cut left out. Prints, per file and horizon, the share of dates right and
the share of whole windows right. With no files it checks the bundled real series with the
exchanges the sample store tags them with (``kronos_core.data.sample_store.REAL_SERIES``)::

    kronos timestamps-holdout                                  # bundled series, their exchanges
    kronos timestamps-holdout prices.csv --exchange XNYS --horizons 1,5,20
    kronos timestamps-holdout --no-exchange                    # the learned template alone
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pandas as pd

from kronos_core.data.holdout import HoldoutResult, holdout_hit_rate
from kronos_core.data.sessions import infer_frequency


@dataclass
class HoldoutCase:
    """One series to check: its name, timestamps and how it is called."""

    name: str
    stamps: pd.DatetimeIndex
    exchange: str | None = None
    timezone: str | None = None
    session_timezone: str | None = None


def bundled_cases(use_exchange: bool = True) -> list[HoldoutCase]:
    """The bundled real series with the exchange (or FX session clock) they are stored with."""
    from kronos_core.data.sample_store import REAL_DIR, REAL_SERIES

    cases = []
    for real in REAL_SERIES.values():
        stamps = pd.DatetimeIndex(pd.read_csv(REAL_DIR / real.file)["timestamps"])
        clock = (real.timezone, real.session_timezone) if real.session_timezone else (None, None)
        cases.append(
            HoldoutCase(real.file, stamps, real.exchange if use_exchange else None, *clock)
        )
    return cases


def holdout_table(
    cases: list[HoldoutCase], horizons: list[int], lookback: int = 512, stride: int = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per (series, horizon): cuts, dates right and windows right (fractions)."""
    rows = []
    for case in cases:
        for h in horizons:
            r: HoldoutResult = holdout_hit_rate(
                case.stamps, h, lookback=lookback, stride=stride, timezone=case.timezone,
                session_timezone=case.session_timezone, exchange=case.exchange, progress=progress,
            )
            rows.append({
                "series": case.name, "frequency": infer_frequency(case.stamps),
                "exchange": case.exchange or "-", "horizon": h, "cuts": r.cuts,
                "dates_right": r.rate, "windows_right": r.window_rate,
            })
    return pd.DataFrame(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="*", metavar="FILE", help="CSV files (default: the bundled real series)"
    )
    parser.add_argument("--exchange", metavar="MIC", help="the files' exchange (XNYS, XSHG...)")
    parser.add_argument(
        "--no-exchange", action="store_true", help="bundled series without their exchanges"
    )
    parser.add_argument(
        "--time-column", default="timestamps", help="time column of FILE (default timestamps)"
    )
    parser.add_argument(
        "--horizons", default="1,5,20,48", help="comma-separated (default 1,5,20,48)"
    )
    parser.add_argument(
        "--lookback", type=int, default=512, help="history timestamps per cut (default 512)"
    )
    parser.add_argument(
        "--stride", type=int, default=1, help="candles between cuts (default 1: every cut)"
    )


def run(args: argparse.Namespace) -> int:
    horizons = [int(h) for h in args.horizons.split(",")]
    if args.files:
        cases = [
            HoldoutCase(f, pd.DatetimeIndex(pd.read_csv(f)[args.time_column]), args.exchange)
            for f in args.files
        ]
    else:
        cases = bundled_cases(use_exchange=not args.no_exchange)
    table = holdout_table(cases, horizons, args.lookback, args.stride)
    with pd.option_context("display.width", 200):
        print(table.to_string(index=False, formatters={
            "dates_right": "{:.2%}".format, "windows_right": "{:.2%}".format}))
    return 0
