"""The learned weekly session template: future timestamps that follow a series' own
trading sessions, learned from its history.

``learn_sessions`` learns a *weekly session template* from the history: which weekdays
are traded and, per weekday, which local times of day carry a candle (so lunch breaks,
night closes, weekend closes and short Friday/Sunday FX sessions come out of the data).
``template_future`` then walks the template forward from the last timestamp. A weekday
or a time of day counts when it has candles on more than half of the history's dates of
that weekday; short sessions (half days, data holes) and the possibly partial first and
last dates are left out of the vote. A session that shifts is followed once it holds for
most of the history's weeks; optionally recent weeks can weigh more (``HALF_LIFE_WEEKS``;
default None, all weeks equal, which scored best on the real files).

Markets whose sessions follow another clock than the stamps (spot FX stamped in UTC
but opening Sunday 17:00 New York time, so shifting an hour in UTC with US daylight
saving) take ``session_timezone``: the template is learned on that wall clock.

Holidays cannot be learned from a short history; pass them as ``holidays``: any
iterable of dates (strings, ``datetime.date``, ``Timestamp``, a ``DatetimeIndex``),
local calendar dates of the series. Every candidate candle whose local date is a
holiday is skipped.

Monthly (and coarser) series are not weekly-periodic; they step by calendar month.
Timestamps are wall clock: naive in, naive out; a tz-aware history is worked on in
its local wall clock (or ``session_timezone``'s) and the result is given in the
history's zone. The public entry point is ``kronos_core.data.timestamps.future_timestamps``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

MINUTE_NS = 60 * 10**9
HOUR_NS = 60 * MINUTE_NS
DAY_NS = 24 * HOUR_NS
WEEK_NS = 7 * DAY_NS
# 1970-01-01 was a Thursday; Monday-based week offset of the epoch:
EPOCH_WEEKDAY = 3
HALF_LIFE_WEEKS: float | None = None  # None: every week of the history counts the same
MAJORITY = 0.5
SHORT_RATIO = 0.5


def infer_frequency(timestamps) -> str:
    """Canonical frequency name of a series from its most common step: ``5min``,
    ``1h``, ``1d``, ``1w``, ``1mo``, ``30s``..."""
    ts = as_int64(timestamps)
    if len(ts) < 2:
        raise ValueError("need at least 2 timestamps to infer a frequency")
    step = mode_step(ts)
    if step <= 0:
        raise ValueError("timestamps are not increasing")
    if 27 * DAY_NS <= step <= 32 * DAY_NS or (
        step > 7 * DAY_NS and np.median(np.diff(ts)) >= 27 * DAY_NS
    ):
        return "1mo"
    if step % WEEK_NS == 0:
        return f"{step // WEEK_NS}w"
    if step % DAY_NS == 0:
        return f"{step // DAY_NS}d"
    if step % HOUR_NS == 0:
        return f"{step // HOUR_NS}h"
    if step % MINUTE_NS == 0:
        return f"{step // MINUTE_NS}min"
    if step % 10**9 == 0:
        return f"{step // 10**9}s"
    return f"{step}ns"


def as_int64(timestamps) -> np.ndarray:
    idx = pd.DatetimeIndex(timestamps)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    return idx.as_unit("ns").asi8


def mode_step(ts: np.ndarray) -> int:
    d = np.diff(ts)
    d = d[d > 0]
    if len(d) == 0:
        return 0
    vals, counts = np.unique(d, return_counts=True)
    return int(vals[np.argmax(counts)])


def holiday_days(holidays) -> np.ndarray:
    """Sorted int64 day numbers (days since epoch) of the holiday dates."""
    if holidays is None:
        return np.empty(0, np.int64)
    if isinstance(holidays, (str, pd.Timestamp)) or not isinstance(holidays, Iterable):
        holidays = [holidays]
    idx = pd.DatetimeIndex(
        list(holidays) if not isinstance(holidays, pd.DatetimeIndex) else holidays
    )
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    return np.unique(idx.as_unit("ns").asi8 // DAY_NS)


@dataclass
class SessionTemplate:
    """Active candle slots as offsets (ns) from Monday 00:00, sorted; see ``learn_sessions``."""

    offsets: np.ndarray
    step: int
    traded_weekdays: tuple[int, ...]

    def describe(self) -> str:
        days = "MTWTFSS"
        return (
            f"{len(self.offsets)} candles/week, step {pd.Timedelta(self.step)}, "
            f"weekdays {''.join(days[d] for d in self.traded_weekdays)}"
        )


def _traded_weekdays(udays: np.ndarray, holiday_days: np.ndarray | None) -> list[int]:
    """Weekdays (Monday 0) with candles on at least half of their calendar dates in the
    span of the sorted day numbers ``udays`` (holidays not counted; every week counts the
    same: holidays cluster, so recency would mislead). Weekdays the span never reached
    default to Monday-Friday traded. When no weekday reaches half (a sparse history), the
    weekdays with any candle are traded."""
    hol = holiday_days if holiday_days is not None else np.empty(0, np.int64)
    last_day = udays[-1]
    cal = np.arange(udays[0], last_day + 1)
    cal = cal[~np.isin(cal, hol)]
    cal_wd = (cal + EPOCH_WEEKDAY) % 7
    present = np.isin(cal, udays)
    traded = []
    for d in range(7):
        m = cal_wd == d
        # the first and last dates are known to be present; judge the weekday on the rest
        inner = m & (cal != udays[0]) & (cal != last_day)
        if inner.any():
            if (inner & present).sum() / inner.sum() >= MAJORITY:
                traded.append(d)
        elif m.any() or d < 5:  # only seen as first/last date, or never reached
            traded.append(d)
    if not traded:
        # sparse history (candles on fewer than half of every weekday's dates: a thinly traded
        # series, weekly samples): the weekdays that carry candles at all
        traded = sorted({int(d) for d in (udays + EPOCH_WEEKDAY) % 7})
    return traded


def learn_sessions(
    ts: np.ndarray, holiday_days: np.ndarray | None = None, half_life_weeks: float | None = None
) -> SessionTemplate:
    """Learn the weekly session template from naive int64-ns timestamps (sorted).

    * A weekday is traded when, over the history's span, it has candles on at least
      half of its calendar dates that are not holidays (every week the same). Weekdays
      the span never reached default to Monday-Friday traded, weekend not.
    * A time of day is active on a traded weekday when it has a candle on at least
      half (recency-weighted) of that weekday's complete dates (the first and last
      date of the history may be partial and are left out when others exist).
      A weekday with no complete dates uses the pooled times of all complete dates.
    """
    if half_life_weeks is None:
        half_life_weeks = HALF_LIFE_WEEKS
    step = mode_step(ts)
    day = ts // DAY_NS
    tod = ts - day * DAY_NS
    udays, first_idx = np.unique(day, return_index=True)
    wd_of = (udays + EPOCH_WEEKDAY) % 7
    last_day = udays[-1]
    age_w = (last_day - udays) / 7.0
    w = 0.5 ** (age_w / half_life_weeks) if half_life_weeks else np.ones(len(udays))

    traded = _traded_weekdays(udays, holiday_days)

    # complete dates: all but the first and last when there are more than two, and
    # not short sessions (fewer than half the median candles of their weekday)
    complete = np.ones(len(udays), bool)
    if len(udays) > 2:
        complete[0] = complete[-1] = False
    counts = np.diff(np.append(first_idx, len(ts)))
    for d in range(7):
        m = complete & (wd_of == d)
        if m.any():
            complete[m] &= counts[m] >= SHORT_RATIO * np.median(counts[m])
    date_idx = np.searchsorted(udays, day)
    # per (weekday, tod) weighted presence
    uniq_tod, tod_idx = np.unique(tod, return_inverse=True)
    n_tod = len(uniq_tod)
    presence = np.zeros((len(udays), n_tod), bool)
    presence[date_idx, tod_idx] = True
    pooled_w = w[complete]
    pooled = (
        (presence[complete] * pooled_w[:, None]).sum(0) > MAJORITY * pooled_w.sum()
        if complete.any()
        else presence.any(0)
    )
    offsets = []
    for d in traded:
        m = complete & (wd_of == d)
        if m.any():
            wm = w[m]
            active = (presence[m] * wm[:, None]).sum(0) > MAJORITY * wm.sum()
        else:
            active = pooled
        offsets.append(d * DAY_NS + uniq_tod[active])
    off = np.sort(np.concatenate(offsets)) if offsets else np.empty(0, np.int64)
    if len(off) == 0:  # degenerate: fall back to the raw grid on traded weekdays
        grid = np.arange(0, DAY_NS, max(step, 1), dtype=np.int64)
        off = np.sort(np.concatenate([d * DAY_NS + grid for d in traded]))
    return SessionTemplate(offsets=off.astype(np.int64), step=step, traded_weekdays=tuple(traded))


def _walk(template: SessionTemplate, last: int, horizon: int, hol: np.ndarray) -> np.ndarray:
    off = template.offsets
    week0 = ((last // DAY_NS + EPOCH_WEEKDAY) // 7) * 7 - EPOCH_WEEKDAY  # Monday, in days
    base = week0 * DAY_NS
    n_weeks = max(2, -(-horizon // max(len(off), 1)) + 2)
    out = np.empty(0, np.int64)
    for _ in range(60):
        cand = (base + off[None, :] + WEEK_NS * np.arange(n_weeks)[:, None]).ravel()
        cand = cand[cand > last]
        if len(hol):
            cand = cand[~np.isin(cand // DAY_NS, hol)]
        if len(cand) >= horizon:
            out = cand[:horizon]
            break
        n_weeks *= 2
    else:  # pragma: no cover - holidays cover years
        raise ValueError("could not place the horizon: the holidays cover every session")
    return out


def _monthly(idx: pd.DatetimeIndex, horizon: int, hol: np.ndarray) -> np.ndarray:
    last = idx[-1]
    offset: pd.offsets.BaseOffset
    if idx.is_month_end.all():
        offset = pd.offsets.MonthEnd()
    elif (idx + pd.offsets.BMonthEnd(0) == idx).all():
        offset = pd.offsets.BMonthEnd()
    elif idx.is_month_start.all():
        offset = pd.offsets.MonthBegin()
    else:
        offset = pd.DateOffset(months=1)
    out: list[int] = []  # int64 ns
    t = last
    while len(out) < horizon:
        t = t + offset
        if len(hol) and (t.value // DAY_NS) in hol:
            continue
        out.append(t.value)
    return np.asarray(out, np.int64)


def localize(idx: pd.DatetimeIndex, tz) -> pd.DatetimeIndex:
    """Naive wall-clock stamps -> aware; DST-ambiguous stamps take standard time and
    nonexistent ones move forward (markets rarely trade at those hours)."""
    return idx.tz_localize(tz, ambiguous=np.zeros(len(idx), bool), nonexistent="shift_forward")


def template_future(idx, horizon, holidays, timezone, session_timezone, exchange):
    """``future_timestamps`` from the learned weekly template (and, when ``exchange`` is
    given, that exchange's closures added to ``holidays``)."""
    out_tz = idx.tz
    if session_timezone is not None and exchange is None:
        if idx.tz is None:
            if timezone is None:
                raise ValueError(
                    "a naive history with session_timezone needs timezone= (the zone of its stamps)"
                )
            idx = localize(idx, timezone)
        work = idx.tz_convert(session_timezone).tz_localize(None)
    else:
        session_timezone = None
        work = idx.tz_localize(None) if idx.tz is not None else idx
    ts = work.as_unit("ns").asi8
    hol = holiday_days(holidays)
    if exchange is not None:
        from kronos_core.data.calendars import sessions_covering

        first = int(ts[-1] // DAY_NS)
        last = first + 4 * 366 + horizon
        closed = sessions_covering(exchange, first, last).closed_days(first, last)
        hol = np.union1d(hol, closed)
    if horizon == 0:
        out = np.empty(0, np.int64)
    elif np.median(np.diff(ts)) >= 27 * DAY_NS:
        out = _monthly(work, horizon, hol)
    else:
        out = _walk(learn_sessions(ts, hol), int(ts[-1]), horizon, hol)
    result = pd.DatetimeIndex(out.view("datetime64[ns]"))
    if session_timezone is not None:
        result = localize(result, session_timezone)
        return (
            result.tz_convert(out_tz)
            if out_tz is not None
            else result.tz_convert(timezone).tz_localize(None)
        )
    return localize(result, out_tz) if out_tz is not None else result


def session_clock(timestamps, timezone=None, session_timezone=None) -> pd.DatetimeIndex:
    """Timestamps on the naive wall clock that ``future_timestamps`` learns sessions on."""
    idx = pd.DatetimeIndex(timestamps)
    if session_timezone is None:
        return idx.tz_localize(None) if idx.tz is not None else idx
    if idx.tz is None:
        idx = localize(idx, timezone)
    return idx.tz_convert(session_timezone).tz_localize(None)
