"""Future timestamps that follow a series' own trading sessions, learned from its history.

``future_timestamps(history, horizon)`` learns a *weekly session template* from the
history: which weekdays are traded and, per weekday, which local times of day carry
a candle (so lunch breaks, night closes, weekend closes and short Friday/Sunday FX
sessions come out of the data). It then walks the template forward from the last
timestamp. A weekday or a time of day counts when it has candles on more than half
of the history's dates of that weekday; short sessions (half days, data holes) and
the possibly partial first and last dates are left out of the vote. A session that
shifts is followed once it holds for most of the history's weeks; optionally recent
weeks can weigh more (``HALF_LIFE_WEEKS``; default None, all weeks equal, which
scored best on the real files).

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
history's zone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

MINUTE_NS = 60 * 10**9
HOUR_NS = 60 * MINUTE_NS
DAY_NS = 24 * HOUR_NS
WEEK_NS = 7 * DAY_NS
# 1970-01-01 was a Thursday; Monday-based week offset of the epoch:
_EPOCH_WEEKDAY = 3
HALF_LIFE_WEEKS: float | None = None  # None: every week of the history counts the same
MAJORITY = 0.5
SHORT_RATIO = 0.5


def infer_frequency(timestamps) -> str:
    """Canonical frequency name of a series from its most common step: ``5min``,
    ``1h``, ``1d``, ``1w``, ``1mo``, ``30s``..."""
    ts = _as_int64(timestamps)
    if len(ts) < 2:
        raise ValueError("need at least 2 timestamps to infer a frequency")
    step = _mode_step(ts)
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


def _as_int64(timestamps) -> np.ndarray:
    idx = pd.DatetimeIndex(timestamps)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    return idx.as_unit("ns").asi8


def _mode_step(ts: np.ndarray) -> int:
    d = np.diff(ts)
    d = d[d > 0]
    if len(d) == 0:
        return 0
    vals, counts = np.unique(d, return_counts=True)
    return int(vals[np.argmax(counts)])


def _holiday_days(holidays) -> np.ndarray:
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
    default to Monday-Friday traded."""
    hol = holiday_days if holiday_days is not None else np.empty(0, np.int64)
    last_day = udays[-1]
    cal = np.arange(udays[0], last_day + 1)
    cal = cal[~np.isin(cal, hol)]
    cal_wd = (cal + _EPOCH_WEEKDAY) % 7
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
    step = _mode_step(ts)
    day = ts // DAY_NS
    tod = ts - day * DAY_NS
    udays, first_idx = np.unique(day, return_index=True)
    wd_of = (udays + _EPOCH_WEEKDAY) % 7
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
    week0 = ((last // DAY_NS + _EPOCH_WEEKDAY) // 7) * 7 - _EPOCH_WEEKDAY  # Monday, in days
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
    if idx.is_month_end.all():
        offset = pd.offsets.MonthEnd()
    elif (idx + pd.offsets.BMonthEnd(0) == idx).all():
        offset = pd.offsets.BMonthEnd()
    elif idx.is_month_start.all():
        offset = pd.offsets.MonthBegin()
    else:
        offset = pd.DateOffset(months=1)
    out = []
    t = last
    while len(out) < horizon:
        t = t + offset
        if len(hol) and (t.value // DAY_NS) in hol:
            continue
        out.append(t.value)
    return np.asarray(out, np.int64)


def _localize(idx: pd.DatetimeIndex, tz) -> pd.DatetimeIndex:
    """Naive wall-clock stamps -> aware; DST-ambiguous stamps take standard time and
    nonexistent ones move forward (markets rarely trade at those hours)."""
    return idx.tz_localize(tz, ambiguous=np.zeros(len(idx), bool), nonexistent="shift_forward")


def future_timestamps(
    history,
    horizon: int,
    holidays=None,
    *,
    timezone=None,
    session_timezone=None,
    exchange: str | None = None,
) -> pd.DatetimeIndex:
    """The next ``horizon`` timestamps of a series, following its trading sessions.

    ``history``: the series' timestamps (DatetimeIndex or anything it takes; strictly
    increasing, at least 2). ``holidays``: optional local dates on which the market is
    closed (on top of the exchange calendar, if any). Returns a DatetimeIndex of
    ``horizon`` timestamps after ``history[-1]``, naive or aware like the input.

    ``exchange``: the venue's ISO MIC or alias (``XNYS``, ``XNAS``, ``XSHG``, ``XHKG``...).
    When given, daily series step through the exchange's sessions and intraday series
    through its trading hours (open, lunch break, close, early closes) at the bar step
    learned from the history, stamped at the bar's start or end as the history is; the
    exchange's holidays need no list. Naive stamps are taken on the exchange's clock
    unless ``timezone`` names theirs; ``session_timezone`` is not used. A history that
    does not sit on the exchange's hours (or weekly and coarser series) falls back to
    the learned template below, with the exchange's closures as holidays.

    Without ``exchange``, sessions are learned from the history (module docstring), on
    the wall clock of ``session_timezone`` when given (for example
    ``"America/New_York"`` for spot FX, whose week opens Sunday 17:00 New York time all
    year while its UTC stamps move with US daylight saving), else on the history's own
    wall clock. A naive history with ``session_timezone`` needs ``timezone``: the zone of
    its naive stamps.
    """
    idx = pd.DatetimeIndex(history)
    horizon = int(horizon)
    if horizon < 0:
        raise ValueError(f"horizon must be >= 0, got {horizon}")
    if len(idx) < 2:
        raise ValueError("need at least 2 history timestamps to learn the sessions")
    if idx.hasnans:
        raise ValueError("history timestamps contain NaT")
    ts = _as_int64(idx)
    if not (ts[1:] > ts[:-1]).all():
        raise ValueError("history timestamps must be strictly increasing")
    if exchange is not None:
        from kronos_core.data.calendars import exchange_sessions

        out = _exchange_future(idx, horizon, holidays, exchange_sessions(exchange), timezone)
        if out is not None:
            return out
    return _learned_future(idx, horizon, holidays, timezone, session_timezone, exchange)


def _learned_future(idx, horizon, holidays, timezone, session_timezone, exchange):
    """``future_timestamps`` from the learned weekly template (and, when ``exchange`` is
    given, that exchange's closures added to ``holidays``)."""
    out_tz = idx.tz
    if session_timezone is not None and exchange is None:
        if idx.tz is None:
            if timezone is None:
                raise ValueError(
                    "a naive history with session_timezone needs timezone= (the zone of its stamps)"
                )
            idx = _localize(idx, timezone)
        work = idx.tz_convert(session_timezone).tz_localize(None)
    else:
        session_timezone = None
        work = idx.tz_localize(None) if idx.tz is not None else idx
    ts = work.as_unit("ns").asi8
    hol = _holiday_days(holidays)
    if exchange is not None:
        from kronos_core.data.calendars import exchange_sessions

        first = int(ts[-1] // DAY_NS)
        closed = exchange_sessions(exchange).closed_days(first, first + 4 * 366 + horizon)
        hol = np.union1d(hol, closed)
    if horizon == 0:
        out = np.empty(0, np.int64)
    elif np.median(np.diff(ts)) >= 27 * DAY_NS:
        out = _monthly(work, horizon, hol)
    else:
        out = _walk(learn_sessions(ts, hol), int(ts[-1]), horizon, hol)
    result = pd.DatetimeIndex(out.view("datetime64[ns]"))
    if session_timezone is not None:
        result = _localize(result, session_timezone)
        return (
            result.tz_convert(out_tz)
            if out_tz is not None
            else result.tz_convert(timezone).tz_localize(None)
        )
    return _localize(result, out_tz) if out_tz is not None else result


def _exchange_future(idx, horizon, holidays, sessions, timezone) -> pd.DatetimeIndex | None:
    """``future_timestamps`` on an exchange calendar; None when the history's step or
    stamps do not fit the exchange's sessions (the caller falls back to the template).
    Works on the exchange's wall clock: free for naive stamps already on it."""
    zone = idx.tz if idx.tz is not None else timezone
    on_clock = zone is None or str(zone) == sessions.tz
    if idx.tz is not None:
        local = idx.tz_localize(None) if on_clock else idx.tz_convert(sessions.tz).tz_localize(None)
    else:
        local = idx if on_clock else _localize(idx, zone).tz_convert(sessions.tz).tz_localize(None)
    wall = _as_int64(local)
    hol = _holiday_days(holidays)
    step = _mode_step(wall)
    if step == DAY_NS:  # daily: the next sessions, at the history's own time of day
        own = _as_int64(idx)
        last_day = int(own[-1] // DAY_NS)
        out = _next_session_days(sessions, last_day, horizon, hol) * DAY_NS + (own[-1] - last_day * DAY_NS)
        result = pd.DatetimeIndex(out.view("datetime64[ns]"))
        return _localize(result, idx.tz) if idx.tz is not None else result
    if step >= DAY_NS or step <= 0:
        return None
    bars = _exchange_bars(sessions, wall, step, horizon, hol)
    if bars is None:
        return None
    result = pd.DatetimeIndex(bars.view("datetime64[ns]"))
    if on_clock:
        return _localize(result, idx.tz) if idx.tz is not None else result
    result = _localize(result, sessions.tz).tz_convert(zone)
    return result if idx.tz is not None else result.tz_localize(None)


def _next_session_days(sessions, last_day: int, horizon: int, hol: np.ndarray) -> np.ndarray:
    """The first ``horizon`` session dates after ``last_day`` that are not in ``hol``."""
    need = last_day + 2 * horizon + 30
    while True:
        sess = sessions.extended(need)
        days = sess.day[np.searchsorted(sess.day, last_day, side="right") :]
        days = days[~np.isin(days, hol)] if len(hol) else days
        if len(days) >= horizon:
            return days[:horizon]
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


def _exchange_bars(sessions, wall, step, horizon, hol) -> np.ndarray | None:
    """The next ``horizon`` intraday bars (exchange wall-clock ns) on the exchange's sessions,
    labelled like the history ``wall`` (bar start, bar end, or both ends of the session:
    whichever grid fits its stamps best); None when fewer than half the history's stamps
    sit on any grid."""
    first_day, last_day = int(wall[0] // DAY_NS), int(wall[-1] // DAY_NS)
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
        sess = sessions.extended(last_day + 2 * n_sess + 14)
        start = int(np.searchsorted(sess.day, last_day))
        bars, days = _bar_grid(*sess.segments(start, start + n_sess), step, label)
        keep = bars > wall[-1]
        if len(hol):
            keep &= ~np.isin(days, hol)
        bars = bars[keep]
        if len(bars) >= horizon:
            return bars[:horizon]
        n_sess *= 2


def session_clock(timestamps, timezone=None, session_timezone=None) -> pd.DatetimeIndex:
    """Timestamps on the naive wall clock that ``future_timestamps`` learns sessions on."""
    idx = pd.DatetimeIndex(timestamps)
    if session_timezone is None:
        return idx.tz_localize(None) if idx.tz is not None else idx
    if idx.tz is None:
        idx = _localize(idx, timezone)
    return idx.tz_convert(session_timezone).tz_localize(None)


# --------------------------------------------------------------------------- hold-out check


def missing_trading_days(timestamps) -> pd.DatetimeIndex:
    """Dates inside a series' span with no candle, on weekdays it usually trades.

    A weekday "usually trades" when at least half of its calendar dates in the span
    have candles. These are the series' full-day closures (exchange holidays, data
    outages): the exchange calendar one would pass as ``holidays``.
    """
    ts = _as_int64(timestamps)
    days = np.unique(ts // DAY_NS)
    cal = np.arange(days[0], days[-1] + 1)
    present = np.isin(cal, days)
    wd = (cal + _EPOCH_WEEKDAY) % 7
    usual = [d for d in range(7) if (wd == d).any() and present[wd == d].mean() >= MAJORITY]
    missing = cal[~present & np.isin(wd, usual)]
    return pd.DatetimeIndex((missing * DAY_NS).view("datetime64[ns]"))


def short_session_days(timestamps, ratio: float = 0.5) -> pd.DatetimeIndex:
    """Dates (not the first or last of the series) with fewer than ``ratio`` times the
    median number of candles of their weekday: half-day sessions and data holes."""
    ts = _as_int64(timestamps)
    days, counts = np.unique(ts // DAY_NS, return_counts=True)
    wd = (days + _EPOCH_WEEKDAY) % 7
    short = np.zeros(len(days), bool)
    for d in range(7):
        m = wd == d
        if m.any():
            short[m] = counts[m] < ratio * np.median(counts[m])
    short[0] = short[-1] = False
    return pd.DatetimeIndex((days[short] * DAY_NS).view("datetime64[ns]"))


@dataclass
class HoldoutResult:
    """Outcome of ``holdout_hit_rate``: ``rate = hits / compared`` (dates right) and
    ``window_rate = windows_right / (cuts - excluded_cuts)`` (whole horizons right)."""

    hits: int
    compared: int
    cuts: int
    excluded_cuts: int
    windows_right: int = 0

    @property
    def rate(self) -> float:
        return self.hits / self.compared if self.compared else float("nan")

    @property
    def window_rate(self) -> float:
        judged = self.cuts - self.excluded_cuts
        return self.windows_right / judged if judged else float("nan")


def holdout_hit_rate(
    timestamps,
    horizon: int,
    lookback: int = 512,
    stride: int = 1,
    use_holidays: bool = False,
    timezone=None,
    session_timezone=None,
    *,
    exchange: str | None = None,
    exclude_closures: bool = False,
    progress: bool = False,
) -> HoldoutResult:
    """Hold-out check of ``future_timestamps`` on a real series, as a user calls it.

    For every cut ``c`` in ``lookback, lookback + stride, ...`` up to ``n - horizon``, predict
    the next ``horizon`` timestamps from the ``lookback`` timestamps before the cut (and
    ``exchange``, if given) and count those equal to the real ``ts[c : c + horizon]``,
    position by position. By default nothing is taken from the future: no holiday list,
    no cut left out.

    Two leaky options remain for comparison only (they read the whole series, future
    included, which a user cannot do): ``use_holidays`` passes the series' own
    ``missing_trading_days`` as the holiday list and leaves out cuts whose window touches a
    ``short_session_days`` date; ``exclude_closures`` leaves out cuts whose window spans a
    missing trading day or a short session.
    """
    hist = pd.DatetimeIndex(timestamps)
    ts = _as_int64(hist)
    n = len(ts)
    skip_days = np.empty(0, np.int64)
    holidays = None
    clock = ts
    if use_holidays or exclude_closures:
        clock = _as_int64(session_clock(hist, timezone, session_timezone))
        missing = missing_trading_days(clock)
        skip_days = short_session_days(clock).asi8 // DAY_NS
        if use_holidays:
            holidays = missing
        else:
            skip_days = np.union1d(skip_days, missing.asi8 // DAY_NS)
    result = HoldoutResult(0, 0, 0, 0)
    cuts = range(lookback, n - horizon + 1, stride)
    for c in tqdm(cuts, desc=f"hold-out h={horizon}", unit="cut", disable=not progress, leave=False):
        result.cuts += 1
        if len(skip_days):
            window_days = np.arange(clock[c - 1] // DAY_NS, clock[c + horizon - 1] // DAY_NS + 1)
            if np.isin(window_days, skip_days).any():
                result.excluded_cuts += 1
                continue
        pred = future_timestamps(
            hist[c - lookback : c], horizon, holidays, timezone=timezone,
            session_timezone=session_timezone, exchange=exchange,
        )
        right = int((_as_int64(pred) == ts[c : c + horizon]).sum())
        result.hits += right
        result.compared += horizon
        result.windows_right += int(right == horizon)
    return result
