"""Future timestamps on an exchange's calendar: the next sessions of a daily series, the
next bars of an intraday one on the exchange's trading hours (open, lunch break, close,
early closes), stamped at the bar's start, its end, or both ends of the session as the
history is. The sessions come from ``kronos_core.data.calendars``; the public entry point
is ``kronos_core.data.timestamps.future_timestamps(..., exchange=...)``.

The calendar is built over the dates the history and the horizon need
(``calendars.sessions_covering``). Where those lie outside the library's bounds for the
venue a ``CalendarRangeWarning`` names the venue and the dates its calendar holds: a
history that ends before them is answered by the learned template, a horizon that runs
past them continues on weekdays with the last session's hours.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from kronos_core.data.calendars import (
    CalendarRangeWarning,
    ExchangeSessions,
    exchange_sessions,
    sessions_covering,
)
from kronos_core.data.sessions import DAY_NS, MAJORITY, as_int64, holiday_days, localize, mode_step

# warnings point at the caller of future_timestamps:
# warn <- _warn_* <- _next_session_days / _exchange_bars <- exchange_future <- future_timestamps
_STACKLEVEL = 5


def _warn_before(sessions: ExchangeSessions) -> None:
    warnings.warn(
        f"the {sessions.name} calendar of exchange_calendars starts on {sessions.first_date()}; a "
        "history that ends before it gets future timestamps from its learned session template "
        "(no holidays known)",
        CalendarRangeWarning, stacklevel=_STACKLEVEL,
    )


def _warn_after(sessions: ExchangeSessions, last_day: int) -> None:
    """Warns when future dates up to ``last_day`` run past the calendar's end."""
    if last_day > sessions.end_day:
        warnings.warn(
            f"the {sessions.name} calendar of exchange_calendars ends on {sessions.last_date()}; "
            "future timestamps after it continue on weekdays with the last session's hours (no "
            "holidays known)",
            CalendarRangeWarning, stacklevel=_STACKLEVEL,
        )


def exchange_future(idx, horizon, holidays, exchange, timezone) -> pd.DatetimeIndex | None:
    """``future_timestamps`` on ``exchange``'s calendar; None when the history's step or
    stamps do not fit the exchange's sessions, or the history ends before the calendar's
    first date (the caller falls back to the template). Works on the exchange's wall clock:
    free for naive stamps already on it."""
    sessions = exchange_sessions(exchange)  # the venue's clock (and an unknown name's error)
    zone = idx.tz if idx.tz is not None else timezone
    on_clock = zone is None or str(zone) == sessions.tz
    if idx.tz is not None:
        local = idx.tz_localize(None) if on_clock else idx.tz_convert(sessions.tz).tz_localize(None)
    else:
        local = idx if on_clock else localize(idx, zone).tz_convert(sessions.tz).tz_localize(None)
    wall = as_int64(local)
    hol = holiday_days(holidays)
    step = mode_step(wall)
    if step == DAY_NS:  # daily: the next sessions, at the history's own time of day
        own = as_int64(idx)
        last_day = int(own[-1] // DAY_NS)
        days = _next_session_days(exchange, last_day, horizon, hol)
        if days is None:
            return None
        out = days * DAY_NS + (own[-1] - last_day * DAY_NS)
        result = pd.DatetimeIndex(out.view("datetime64[ns]"))
        return localize(result, idx.tz) if idx.tz is not None else result
    if step >= DAY_NS or step <= 0:
        return None
    bars = _exchange_bars(exchange, wall, step, horizon, hol)
    if bars is None:
        return None
    result = pd.DatetimeIndex(bars.view("datetime64[ns]"))
    if on_clock:
        return localize(result, idx.tz) if idx.tz is not None else result
    result = localize(result, sessions.tz).tz_convert(zone)
    return result if idx.tz is not None else result.tz_localize(None)


def _next_session_days(
    exchange: str, last_day: int, horizon: int, hol: np.ndarray
) -> np.ndarray | None:
    """The first ``horizon`` session dates after ``last_day`` that are not in ``hol``; None
    (and a warning) when ``last_day`` is before the calendar's first date."""
    need = last_day + 2 * horizon + 30
    while True:
        sessions = sessions_covering(exchange, last_day, need)
        if last_day < sessions.start_day:
            _warn_before(sessions)
            return None
        sess = sessions.extended(need)
        days = sess.day[np.searchsorted(sess.day, last_day, side="right") :]
        days = days[~np.isin(days, hol)] if len(hol) else days
        if len(days) >= horizon:
            days = days[:horizon]
            if len(days):
                _warn_after(sessions, int(days[-1]))
            return days
        need += 2 * horizon + 30


BAR_LABELS = ("start", "end", "both")


def _bar_grid(starts, ends, days, step: int, label: str) -> tuple[np.ndarray, np.ndarray]:
    """Bar stamps (wall-clock ns) of trading segments at ``step``, and each stamp's session
    date. ``label`` is how the bars are stamped: at each bar's start (``"start"``), at its
    end (``"end"``; the last bar of a segment may be cut short by its close), or at both
    ends of the segment (``"both"``: the bar starts plus one stamp at the close, as vendors
    that keep the opening and closing auction prints as bars of their own do: US 1-minute
    bars 09:30 to 16:00, 391 a day)."""
    counts = -(-(ends - starts) // step)  # (S,) bars per segment, a partial last one included
    counts = np.maximum(counts, 0)
    first = np.repeat(starts, counts)
    k = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    bars, bar_days = first + k * step, np.repeat(days, counts)
    if label == "end":
        bars = np.minimum(bars + step, np.repeat(ends, counts))
    elif label == "both":
        bars, bar_days = np.concatenate([bars, ends]), np.concatenate([bar_days, days])
        order = np.argsort(bars, kind="stable")
        bars, bar_days = bars[order], bar_days[order]
    return bars, bar_days


def _share_on(stamps: np.ndarray, grid: np.ndarray) -> float:
    """Fraction of ``stamps`` found in the sorted ``grid``."""
    if len(grid) == 0:
        return 0.0
    pos = np.minimum(np.searchsorted(grid, stamps), len(grid) - 1)
    return float((grid[pos] == stamps).mean())


def _grid_fit(stamps: np.ndarray, grid: np.ndarray) -> float:
    """How well ``grid`` explains the history: stamps on it over stamps plus the grid points
    inside the history's span that hold no stamp (Jaccard). Unlike ``_share_on`` it falls
    for a grid with points the history never uses, so the closing-print label ("both")
    wins only where the history has those prints."""
    inside = grid[(grid >= stamps[0]) & (grid <= stamps[-1])]
    hits = int(np.isin(inside, stamps).sum())
    return hits / (len(np.unique(stamps)) + len(inside) - hits)


def _exchange_bars(exchange, wall, step, horizon, hol) -> np.ndarray | None:
    """The next ``horizon`` intraday bars (exchange wall-clock ns) on the exchange's sessions,
    labelled like the history ``wall`` (bar start, bar end, or both ends of the session:
    whichever grid fits its stamps best); None when fewer than half the history's stamps
    sit on any grid, or (with a warning) when the history ends before the calendar's first
    date."""
    first_day, last_day = int(wall[0] // DAY_NS), int(wall[-1] // DAY_NS)
    sessions = sessions_covering(exchange, first_day, last_day + 30)
    if last_day < sessions.start_day:
        _warn_before(sessions)
        return None
    if first_day < sessions.start_day:  # judge the grid on the stamps the calendar holds
        first_day = sessions.start_day
        wall = wall[wall // DAY_NS >= first_day]
    lo = int(np.searchsorted(sessions.day, first_day))
    hi = int(np.searchsorted(sessions.day, last_day, side="right"))
    seg = sessions.segments(lo, hi)
    grids = [_bar_grid(*seg, step, label)[0] for label in BAR_LABELS]
    if max(_share_on(wall, g) for g in grids) < MAJORITY:
        return None
    fits = [_grid_fit(wall, g) for g in grids]
    label = BAR_LABELS[int(np.argmax(fits))]  # ties: the first, bar start
    n_sess = 4
    while True:
        need = last_day + 2 * n_sess + 14
        sessions = sessions_covering(exchange, first_day, need)
        sess = sessions.extended(need)
        start = int(np.searchsorted(sess.day, last_day))
        bars, days = _bar_grid(*sess.segments(start, start + n_sess), step, label)
        keep = bars > wall[-1]
        if len(hol):
            keep &= ~np.isin(days, hol)
        bars, days = bars[keep], days[keep]
        if len(bars) >= horizon:
            if horizon:
                _warn_after(sessions, int(days[horizon - 1]))
            return bars[:horizon]
        n_sess *= 2
