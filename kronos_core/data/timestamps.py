"""Future timestamps of a series: ``future_timestamps``, the public face of three modules.

* ``kronos_core.data.sessions``: the weekly session template learned from the history
  (weekdays and times of day traded, lunch breaks, FX's New York clock, monthly steps).
* ``kronos_core.data.calendar_bars``: sessions and bars on an exchange's calendar
  (``exchange=``), with holidays, special closures and early closes.
* ``kronos_core.data.holdout``: the hold-out check of both on real series.
"""

from __future__ import annotations

import pandas as pd

from kronos_core.data.calendar_bars import exchange_future
from kronos_core.data.round_clock import round_clock_future, round_clock_name
from kronos_core.data.sessions import as_int64, template_future

# Stamps before the forecast origin the session template learns from when a series' metadata
# names no calendar: the lookback window alone can miss whole sessions (32 five-minute A-share
# bars end before the afternoon, and the learned week then skipped to another day). 2,048 is ~8
# weeks of 5-minute A-share bars, a week of 5-minute crypto, eight years of daily bars; learning
# from it takes about a millisecond.
TEMPLATE_HISTORY_ROWS = 2048


def template_history(timestamps, end: int, meta) -> object | None:
    """The stamps ``timestamps[:end]`` a series' future is learned from when its metadata names no
    calendar (``calendar_of``): the last ``TEMPLATE_HISTORY_ROWS`` of them, never any after the
    origin; None when the metadata names one (the window's last stamps suffice then). A slice, not
    a copy."""
    if calendar_of(meta):
        return None
    return timestamps[max(0, end - TEMPLATE_HISTORY_ROWS):end]


def calendar_of(meta) -> str | None:
    """The calendar a stored series' future timestamps follow, from its metadata: the
    ``exchange`` it was imported with, else the ``sessions`` the store inferred from its whole
    history (``24/7``, ``kronos_core.data.round_clock``), else None (learned from the history
    before the origin: ``template_history``).
    The service's prepare stage and the evaluation both ask here."""
    return (meta or {}).get("exchange") or (meta or {}).get("sessions") or None


def future_options(meta) -> dict:
    """Keyword arguments of ``future_timestamps`` from a series' metadata: its calendar
    (``calendar_of``), the zone of its naive stamps and the clock its sessions follow."""
    meta = meta or {}
    kw: dict = {}
    exchange = calendar_of(meta)
    if exchange:
        kw["exchange"] = exchange
    if meta.get("session_timezone"):
        kw["session_timezone"] = meta["session_timezone"]
    if meta.get("timezone"):
        kw["timezone"] = meta["timezone"]
    return kw


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

    ``exchange``: the venue's ISO MIC or alias (``XNYS``, ``XNAS``, ``XSHG``, ``XHKG``...), or
    ``24/7`` / ``24/5`` (round-the-clock markets, ``kronos_core.data.round_clock``: the next bars
    at the history's step, the FX weekend skipped for 24/5 on ``timezone``'s clock).
    When given, daily series step through the exchange's sessions and intraday series
    through its trading hours (open, lunch break, close, early closes) at the bar step
    learned from the history, stamped at the bar's start or end as the history is; the
    exchange's holidays need no list. Naive stamps are taken on the exchange's clock
    unless ``timezone`` names theirs; ``session_timezone`` is not used. A history that
    does not sit on the exchange's hours (or weekly and coarser series) falls back to
    the learned template, with the exchange's closures as holidays.

    Without ``exchange``, sessions are learned from the history (``kronos_core.data.sessions``), on
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
    ts = as_int64(idx)
    if not (ts[1:] > ts[:-1]).all():
        raise ValueError("history timestamps must be strictly increasing")
    clock = round_clock_name(exchange)
    if clock is not None:
        return round_clock_future(idx, horizon, clock, timezone)
    if exchange is not None:
        out = exchange_future(idx, horizon, holidays, exchange, timezone)
        if out is not None:
            return out
    return template_future(idx, horizon, holidays, timezone, session_timezone, exchange)
