"""Exchange trading calendars (``exchange_calendars``) as plain arrays for ``future_timestamps``.

A venue is named by its ISO MIC or an alias the library knows: ``XNYS`` (NYSE), ``XNAS``
(Nasdaq), ``XSHG`` (Shanghai), ``XSHE`` (Shenzhen), ``XHKG``, ``XLON``, ``XTKS``... The
library records each venue's holidays, special closures (e.g. hurricane Sandy, 2012-10-29
and 30 at NYSE), early closes and lunch breaks. ``exchange_sessions`` loads one calendar per
venue and range per process (1990-2035 unless asked for more; a tenth of a second for NYSE)
and keeps, per session, its local date and its open / break / close times on the exchange's
wall clock (naive int64 nanoseconds since the epoch), so a history stamped on that clock
needs no time-zone work.

``sessions_covering`` widens the range, in whole decades, to what a history and its horizon
need, within the library's bounds for the venue (XNYS has none; XHKG starts in 1960, XSHG
ends with the last year it has published). What lies outside those bounds is not known:
``ExchangeSessions.start_day`` / ``end_day`` say where the calendar holds, and the callers
(``kronos_core.data.calendar_bars``) warn with ``CalendarRangeWarning``. Past the last
recorded session the sessions continue on weekdays with the last session's hours
(``ExchangeSessions.extended``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

DAY_NS = 24 * 3600 * 10**9
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)
_START_YEAR, _END_YEAR = 1990, 2035  # the range built unless a history needs more
_FIRST_YEAR, _LAST_YEAR = 1678, 2261  # whole years pandas' nanosecond timestamps hold
NO_BREAK = np.iinfo(np.int64).min


class UnknownExchangeError(ValueError):
    """The venue is not one ``exchange_calendars`` knows, or its calendar cannot be built here."""


class CalendarRangeWarning(UserWarning):
    """Future timestamps reach dates the venue's calendar does not hold (before or after the
    library's bounds for it): there they follow the learned template or continue on weekdays."""


# Venues whose calendars exchange_calendars 4.x cannot build on pandas 3: their holiday rules
# use offsets pandas no longer applies to arrays (Orthodox Easter: ASEX, BVB, XBEL, XBSE, XCYS),
# or fail inside the library (TASE / XTAE, ValueError). Found by building every name (the slow
# test ``test_every_listed_exchange_builds``); they are not offered, and asking for one is a
# clear error rather than a server fault.
UNBUILDABLE = frozenset({"ASEX", "BVB", "TASE", "XBEL", "XBSE", "XCYS", "XTAE"})


@dataclass(frozen=True)
class ExchangeSessions:
    """One venue's sessions, sorted; times are naive int64 ns on the exchange's wall clock
    (``tz``).

    ``day``: the session's local date as days since the epoch. ``break_start`` and
    ``break_end`` are ``NO_BREAK`` where the session has no lunch break.
    """

    name: str
    tz: str
    day: np.ndarray
    open: np.ndarray
    break_start: np.ndarray
    break_end: np.ndarray
    close: np.ndarray
    start_day: int  # first local date (days since epoch) the calendar was built from
    end_day: int  # last local date it was built to: closures are known on start_day..end_day

    @property
    def last_day(self) -> int:
        """Local date (days since epoch) of the last session the library records."""
        return int(self.day[-1])

    def first_date(self) -> str:
        """``start_day`` as text (``1960-01-01``)."""
        return _date(self.start_day)

    def last_date(self) -> str:
        """``end_day`` as text (``2026-12-31``)."""
        return _date(self.end_day)

    def segments(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, ends, days) of the continuous trading segments of sessions ``lo:hi`` (a
        lunch break splits a session in two), in time order: wall-clock ns, and each
        segment's session date (days since epoch)."""
        sl = slice(lo, hi)
        o, c, d = self.open[sl], self.close[sl], self.day[sl]
        bs, be = self.break_start[sl], self.break_end[sl]
        has = bs != NO_BREAK
        starts = np.concatenate([o, be[has]])
        ends = np.concatenate([np.where(has, bs, c), c[has]])
        days = np.concatenate([d, d[has]])
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order], days[order]

    def closed_days(self, first: int, last: int) -> np.ndarray:
        """Weekdays (days since epoch) in ``first..last`` with no session: holidays and
        special closures."""
        cal = np.arange(max(first, self.start_day), last + 1, dtype=np.int64)
        cal = cal[(cal + _EPOCH_WEEKDAY) % 7 < 5]
        return cal[(cal <= self.last_day) & ~np.isin(cal, self.day)]

    def extended(self, days_needed: int) -> ExchangeSessions:
        """These sessions plus weekday sessions with the last session's hours, through local
        date ``days_needed`` (for forecasts past the library's recorded years)."""
        if days_needed <= self.last_day:
            return self
        extra = np.arange(self.last_day + 1, days_needed + 1, dtype=np.int64)
        extra = extra[(extra + _EPOCH_WEEKDAY) % 7 < 5]
        shift = (extra - self.last_day) * DAY_NS  # same local time of day as the last session

        def cont(col: np.ndarray) -> np.ndarray:
            last = col[-1]
            add = np.full(len(extra), NO_BREAK) if last == NO_BREAK else last + shift
            return np.concatenate([col, add])

        return ExchangeSessions(
            self.name, self.tz, np.concatenate([self.day, extra]), cont(self.open),
            cont(self.break_start), cont(self.break_end), cont(self.close),
            self.start_day, self.end_day,
        )


def _date(day: int) -> str:
    return str(pd.Timestamp(int(day) * DAY_NS).date())


def _year(day: int) -> int:
    return pd.Timestamp(int(day) * DAY_NS).year


_DEFAULT_FIRST_DAY = pd.Timestamp(f"{_START_YEAR}-01-01").value // DAY_NS
_DEFAULT_LAST_DAY = pd.Timestamp(f"{_END_YEAR}-12-31").value // DAY_NS


def exchange_names() -> list[str]:
    """Every venue name and alias the calendar library accepts, as ``exchange_sessions`` looks
    it up (upper-cased), and can build here."""
    import exchange_calendars as xcals

    dispatcher = xcals.calendar_utils.global_calendar_dispatcher
    names = {n for n in xcals.get_calendar_names(include_aliases=True)
             if dispatcher.has_calendar(n.upper()) and n.upper() not in UNBUILDABLE}
    return sorted(names | set(SAME_CALENDAR))


def sessions_covering(exchange: str, first_day: int, last_day: int) -> ExchangeSessions:
    """The sessions of ``exchange`` over at least local dates ``first_day..last_day`` (days
    since epoch), widened to whole decades so that nearby histories share one calendar, and
    within the library's bounds for the venue: check ``start_day`` / ``end_day`` of the
    result for what it could not cover."""
    if _DEFAULT_FIRST_DAY <= first_day and last_day <= _DEFAULT_LAST_DAY:
        return exchange_sessions(exchange)  # the common case: the default calendar's cache entry
    first_year = _year(first_day) // 10 * 10 if first_day < _DEFAULT_FIRST_DAY else None
    last_year = _year(last_day) // 10 * 10 + 9 if last_day > _DEFAULT_LAST_DAY else None
    return exchange_sessions(exchange, first_year, last_year)


# The venues the docs and messages name; each must build (tests walk this list).
LISTED_EXCHANGES = ("XNYS", "XNAS", "XSHG", "XSHE", "XHKG", "XLON", "XTKS")

# MICs exchange_calendars has no calendar of its own for, and the venue whose calendar they
# follow: the Shenzhen exchange (XSHE) keeps the Shanghai exchange's (XSHG) trading days and
# hours (both set by the China Securities Regulatory Commission), and so does the Beijing Stock
# Exchange (BJSE: the name this project records for it; exchange_calendars 4.13 has none).
SAME_CALENDAR = {"XSHE": "XSHG", "BJSE": "XSHG"}


@cache
def exchange_sessions(exchange: str, first_year: int | None = None,
                      last_year: int | None = None) -> ExchangeSessions:
    """The sessions of ``exchange`` (MIC or alias, case-insensitive) from 1990 (or
    ``first_year`` when earlier) to 2035 (or ``last_year`` when later), within the
    calendar's own bounds and pandas' (1678-2261); loaded once per process and range."""
    import exchange_calendars as xcals

    name = str(exchange).strip().upper()
    dispatcher = xcals.calendar_utils.global_calendar_dispatcher
    if name in SAME_CALENDAR and not dispatcher.has_calendar(name):
        import dataclasses

        return dataclasses.replace(
            exchange_sessions(SAME_CALENDAR[name], first_year, last_year), name=name
        )
    if not dispatcher.has_calendar(name):
        raise UnknownExchangeError(
            f"unknown exchange {exchange!r}: use an ISO MIC such as {', '.join(LISTED_EXCHANGES)} "
            "(all: kronos_core.data.calendars.exchange_names())"
        )
    cls = dispatcher._calendar_factories[dispatcher.resolve_alias(name)]
    want_start = pd.Timestamp(
        f"{max(_FIRST_YEAR, min(_START_YEAR, first_year or _START_YEAR))}-01-01"
    )
    want_end = pd.Timestamp(f"{min(_LAST_YEAR, max(_END_YEAR, last_year or _END_YEAR))}-12-31")
    start = max(want_start, pd.Timestamp(cls.bound_min() or want_start))
    end = min(want_end, pd.Timestamp(cls.bound_max() or want_end))
    if name in UNBUILDABLE:
        raise UnknownExchangeError(
            f"the {name} calendar cannot be built with the installed exchange_calendars "
            "and pandas; pass no exchange (sessions are then learned from the history)"
        )
    try:
        cal = xcals.get_calendar(name, start=start, end=end)
    except Exception as exc:  # a library/pandas incompatibility not yet listed in UNBUILDABLE
        raise UnknownExchangeError(
            f"the {name} calendar cannot be built with the installed exchange_calendars and pandas "
            f"({type(exc).__name__}); pass no exchange (sessions are then learned from the history)"
        ) from exc
    sched = cal.schedule

    def ns(col: str) -> np.ndarray:
        values = sched[col]
        out = values.dt.tz_convert(cal.tz).dt.tz_localize(None).to_numpy("datetime64[ns]")
        return np.where(values.isna().to_numpy(), NO_BREAK, out.view(np.int64))

    return ExchangeSessions(
        name=name,
        tz=str(cal.tz),
        day=sched.index.as_unit("ns").asi8 // DAY_NS,
        open=ns("open"),
        break_start=ns("break_start"),
        break_end=ns("break_end"),
        close=ns("close"),
        start_day=start.value // DAY_NS,
        end_day=end.value // DAY_NS,
    )
