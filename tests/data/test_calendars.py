"""Exchange calendars as arrays (``kronos_core.data.calendars``): which venues build, clear
errors for those that cannot, and sessions past the recorded years."""

from __future__ import annotations

import pandas as pd
import pytest

from kronos_core.data.calendars import UnknownExchangeError, exchange_sessions
from kronos_core.data.timestamps import future_timestamps


def test_a_calendar_that_cannot_be_built_is_a_clear_error(monkeypatch):
    import exchange_calendars as xcals

    from kronos_core.data import calendars

    with pytest.raises(UnknownExchangeError, match="ASEX calendar cannot be built"):
        exchange_sessions("asex")
    assert not set(calendars.exchange_names()) & calendars.UNBUILDABLE
    assert {"XNYS", "XNAS", "XSHG", "XHKG"} <= set(calendars.exchange_names())

    def broken(*a, **k):  # a future library/pandas mismatch not yet listed
        raise NotImplementedError("implemented by subclasses")

    calendars.exchange_sessions.cache_clear()
    monkeypatch.setattr(xcals, "get_calendar", broken)
    try:
        with pytest.raises(UnknownExchangeError, match=r"XWBO calendar cannot be built .*NotImplementedError"):
            exchange_sessions("XWBO")
    finally:
        calendars.exchange_sessions.cache_clear()


@pytest.mark.slow
def test_every_listed_exchange_builds():
    """What the API schema offers must work: build every listed calendar (~15 s)."""
    from kronos_core.data.calendars import exchange_names

    failed = []
    for name in exchange_names():
        try:
            exchange_sessions(name)
        except Exception as exc:  # noqa: BLE001 - the list of failures is the assertion
            failed.append(f"{name}: {type(exc).__name__}")
    assert not failed, f"listed but not buildable (add to UNBUILDABLE): {failed}"


def test_past_the_recorded_years_sessions_continue_on_weekdays():
    last = exchange_sessions("XSHG").last_day
    end = pd.Timestamp(last * 86400 * 10**9)
    hist = pd.DatetimeIndex([d for d in pd.date_range(end - pd.Timedelta("20D"), end) if d.day_of_week < 5])
    out = future_timestamps(hist, 5, exchange="XSHG")
    assert len(out) == 5 and (out > end).all() and (out.day_of_week < 5).all()
