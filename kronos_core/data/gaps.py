"""Missing sessions: the days a venue traded that a history skips.

A history of daily or intraday candles of a known exchange should have candles on every
session day between its first and its last candle. ``missing_sessions`` compares the
history's dates (the stamps' own wall-clock dates) with the venue's sessions
(``kronos_core.data.calendars``) and reports the session days with no candle: how many, and
the first few. Bars longer than a day (weekly, monthly) are not checked, and neither are
days outside the range the calendar library holds for the venue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kronos_core.data.calendars import DAY_NS, _date, sessions_covering

SHOWN = 5  # missing dates named in a message


@dataclass(frozen=True)
class MissingSessions:
    """Session days of ``exchange`` with no candle between a history's first and last."""

    exchange: str
    count: int  # session days with no candle
    sessions: int  # session days the range holds
    first: tuple[str, ...]  # the first few of them, YYYY-MM-DD

    def message(self) -> str:
        more = ", ..." if self.count > len(self.first) else ""
        return (f"{self.count} of the {self.sessions} {self.exchange} sessions between the first "
                f"and the last candle have no candle (first: {', '.join(self.first)}{more}): the "
                "history has gaps, which the model reads as consecutive candles")


def _wall_days(timestamps) -> np.ndarray:
    """(n,) int64 local dates (days since the epoch) of naive or aware stamps (wall clock)."""
    idx = pd.DatetimeIndex(timestamps)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    ns = idx.as_unit("ns").asi8
    return ns // DAY_NS


def missing_sessions(timestamps, exchange: str, shown: int = SHOWN) -> MissingSessions | None:
    """The sessions of ``exchange`` that the history ``timestamps`` (sorted, wall clock of
    the venue) skips between its first and last candle, or None when it skips none, has
    fewer than two candles, or has bars longer than a day. Raises
    ``UnknownExchangeError`` for a venue the calendar library does not know."""
    if len(timestamps) < 2:
        return None
    days = np.unique(_wall_days(timestamps))  # (D,) sorted distinct dates
    if len(days) < 2:
        return None
    if len(days) == len(timestamps) and float(np.median(np.diff(days))) > 3.5:
        return None  # weekly or longer bars: most sessions have no bar of their own
    first, last = int(days[0]), int(days[-1])
    cal = sessions_covering(exchange, first, last)
    lo, hi = max(first, cal.start_day), min(last, cal.end_day, cal.last_day)
    held = cal.day[(cal.day >= lo) & (cal.day <= hi)]  # (K,) session dates in range
    if len(held) == 0:
        return None
    gone = held[~np.isin(held, days, assume_unique=True)]
    if len(gone) == 0:
        return None
    first_few = tuple(_date(d) for d in gone[:shown])
    return MissingSessions(cal.name, int(len(gone)), int(len(held)), first_few)
