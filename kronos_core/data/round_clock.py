"""Markets that trade round the clock: ``24/7`` (crypto) and ``24/5`` (spot FX), as calendars.

Both names are accepted wherever an exchange is (``kronos import --exchange``, the request's
``exchange``, a store's metadata, the corpus' ``calendar`` column) and give future timestamps
without a learned template:

* ``24/7``: every bar follows the last one at the history's step, day and night, weekends too.
* ``24/5``: the spot FX week, open from Sunday 17:00 to Friday 17:00 New York time. Intraday
  bars step on at the history's step and skip the weekend closure (a bar stamped in it is not
  made); the naive stamps are read on ``timezone`` (UTC when not given). Daily and coarser bars
  step over Saturdays and Sundays.

``infer_round_clock`` tells a 24/7 series from its whole stored history, so a crypto file imported
without ``--exchange`` is recorded as such (metadata ``sessions``) instead of its sessions being
guessed later from the few hundred candles a forecast reads: 251 five-minute candles are less than
a day, and a template learned from them leaves out the weekend and half the day.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.data.sessions import DAY_NS, HOUR_NS, WEEK_NS, as_int64, learn_sessions, mode_step

ROUND_CLOCK = ("24/7", "24/5")
FX_CLOCK = "America/New_York"  # the FX week opens and closes at 17:00 on this clock
FX_CLOSE_NS = 17 * HOUR_NS
MIN_DAYS = 8  # a week and a day of history before a series is called 24/7


def round_clock_name(exchange: str | None) -> str | None:
    """``"24/7"`` or ``"24/5"`` when ``exchange`` names one (spaces and case ignored), else None."""
    if exchange is None:
        return None
    name = str(exchange).strip().replace(" ", "")
    return name if name in ROUND_CLOCK else None


def _fx_open(local_ns: np.ndarray) -> np.ndarray:
    """Which naive New York wall-clock times (int64 ns) lie inside the FX week."""
    day = local_ns // DAY_NS
    tod = local_ns - day * DAY_NS
    weekday = (day + 3) % 7  # Monday 0 (1970-01-01 was a Thursday)
    closed = (weekday == 5) | ((weekday == 4) & (tod >= FX_CLOSE_NS)) | (
        (weekday == 6) & (tod < FX_CLOSE_NS))
    return ~closed


def _fx_week_mask(cand: np.ndarray, timezone: str | None) -> np.ndarray:
    """Inside-the-FX-week mask of naive stamps ``cand`` (int64 ns) on ``timezone`` (UTC default)."""
    idx = pd.DatetimeIndex(cand.view("datetime64[ns]")).tz_localize(
        timezone or "UTC", ambiguous=np.zeros(len(cand), bool), nonexistent="shift_forward")
    local = idx.tz_convert(FX_CLOCK).tz_localize(None).as_unit("ns").asi8
    return _fx_open(local)


def round_clock_future(idx: pd.DatetimeIndex, horizon: int, name: str,
                       timezone: str | None = None) -> pd.DatetimeIndex:
    """The next ``horizon`` stamps of history ``idx`` (at least 2, increasing) on calendar
    ``name`` (``24/7`` or ``24/5``, module docstring), naive or aware like ``idx``."""
    out_tz = idx.tz
    ts = as_int64(idx)  # naive wall clock of the stamps
    step = mode_step(ts)
    if step <= 0:
        raise ValueError("history timestamps must be increasing")
    if out_tz is not None and timezone is None:
        timezone = str(out_tz)
    last = int(ts[-1])
    out = np.empty(0, np.int64)
    n = max(horizon, 1)
    while len(out) < horizon:
        cand = last + step * np.arange(1, n + 1, dtype=np.int64)
        if name == "24/5":
            if step >= DAY_NS:
                keep = (cand // DAY_NS + 3) % 7 < 5  # the date is a weekday
            else:
                keep = _fx_week_mask(cand, timezone)
            cand = cand[keep]
        out = cand[:horizon]
        n = n * 2 + int(2 * DAY_NS // step) + 1  # a weekend at most per doubling
    result = pd.DatetimeIndex(out.view("datetime64[ns]"))
    return result.tz_localize(out_tz) if out_tz is not None else result


def infer_round_clock(timestamps) -> str | None:
    """``"24/7"`` when the whole history trades every bar of every day of the week (the weekly
    template learned from it, ``kronos_core.data.sessions.learn_sessions``, holds every slot);
    None otherwise, or with less than ``MIN_DAYS`` of history or bars of a day or longer
    (daily series learn their weekdays well from a window already)."""
    ts = np.sort(as_int64(timestamps))
    if len(ts) < 2 or ts[-1] - ts[0] < MIN_DAYS * DAY_NS:
        return None
    step = mode_step(ts)
    if step <= 0 or step >= DAY_NS or DAY_NS % step:
        return None
    template = learn_sessions(ts)
    if len(template.traded_weekdays) == 7 and len(template.offsets) == WEEK_NS // step:
        return "24/7"
    return None
