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
        with pytest.raises(
            UnknownExchangeError, match=r"XWBO calendar cannot be built .*NotImplementedError"
        ):
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
    from kronos_core.data import calendars

    last = exchange_sessions("XSHG").last_day
    end = pd.Timestamp(last * 86400 * 10**9)
    hist = pd.DatetimeIndex(
        [d for d in pd.date_range(end - pd.Timedelta("20D"), end) if d.day_of_week < 5]
    )
    with pytest.warns(
        calendars.CalendarRangeWarning, match="XSHG calendar of exchange_calendars ends on"
    ):
        out = future_timestamps(hist, 5, exchange="XSHG")
    assert len(out) == 5 and (out > end).all() and (out.day_of_week < 5).all()


def test_calendars_are_built_per_decade_range_and_cached():
    from kronos_core.data.calendars import sessions_covering

    day = lambda s: pd.Timestamp(s).value // (86400 * 10**9)  # noqa: E731
    modern = sessions_covering("XNYS", day("2012-01-03"), day("2012-03-01"))
    assert modern is exchange_sessions("XNYS")  # inside 1990-2035: the default calendar
    old = sessions_covering("XNYS", day("1981-05-04"), day("1981-06-01"))
    assert old is sessions_covering("XNYS", day("1986-01-02"), day("1986-02-03"))  # one per decade
    assert old.first_date() == "1980-01-01" and old.last_date() == "2035-12-31"
    far = sessions_covering("XNYS", day("2040-01-02"), day("2040-02-01"))
    assert far.last_date() == "2049-12-31"
    hk = sessions_covering("XHKG", day("1955-01-03"), day("1955-02-01"))
    assert hk.first_date() == "1960-01-01"  # the library's bound for the venue
