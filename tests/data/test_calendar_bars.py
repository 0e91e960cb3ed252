"""Future timestamps on exchange calendars (``kronos_core.data.calendar_bars``): holidays,
lunch breaks and early closes with no holiday list passed."""

from __future__ import annotations

import pandas as pd
import pytest

from kronos_core.data.calendars import UnknownExchangeError
from kronos_core.data.timestamps import future_timestamps

GOOG = "goog_daily.csv"


def _us_30min_left(days: list[str], early: dict[str, str] | None = None) -> pd.DatetimeIndex:
    """Hand-built 30-minute bars stamped at their start, 09:30 to the last bar before the
    close (16:00, or an early close)."""
    out = []
    for d in days:
        close = pd.Timestamp(f"{d} {(early or {}).get(d, '16:00')}")
        out += list(pd.date_range(f"{d} 09:30", close - pd.Timedelta("30min"), freq="30min"))
    return pd.DatetimeIndex(out)


def test_daily_us_holidays_and_special_closures_without_a_list(real_stamps):
    goog = real_stamps[GOOG]
    upto = goog[goog <= "2012-11-21"][-300:]  # Thanksgiving 2012-11-22 is closed
    assert list(future_timestamps(upto, 3, exchange="XNAS")) == list(goog[goog > "2012-11-21"][:3])
    upto = goog[goog <= "2012-10-26"][-300:]  # hurricane Sandy closed 2012-10-29 and 30
    out = future_timestamps(upto, 2, exchange="xnas")  # case-insensitive
    assert list(out) == list(pd.to_datetime(["2012-10-31", "2012-11-01"]))
    # the learned template alone cannot know either closure
    assert future_timestamps(upto, 1)[0] == pd.Timestamp("2012-10-29")


def test_intraday_lunch_break_and_weekend_on_xshg(a_share_stamps):
    """The real A-share 5-minute stamps (shared folder): the exchange's grid is the file's."""
    ts = a_share_stamps
    upto = ts[ts <= "2024-07-19 11:30"][-200:]  # Friday, morning close
    out = future_timestamps(upto, 48 + 24 + 1, exchange="XSHG")
    assert out[0] == pd.Timestamp("2024-07-19 13:05")  # stamped at the bar's end, after lunch
    assert out[24] == pd.Timestamp("2024-07-22 09:35")  # Monday open, no weekend
    assert out.equals(ts[ts > "2024-07-19 11:30"][:73])


def test_intraday_us_early_close_and_holiday_stamped_at_bar_start():
    hist = _us_30min_left(["2012-11-19", "2012-11-20", "2012-11-21"])
    out = future_timestamps(hist, 7 + 2, exchange="XNYS")
    # Thanksgiving closed, Friday closes at 13:00, then Monday
    want = _us_30min_left(["2012-11-23"], {"2012-11-23": "13:00"})
    assert list(out[:7]) == list(want)
    assert list(out[7:]) == list(pd.to_datetime(["2012-11-26 09:30", "2012-11-26 10:00"]))


def test_intraday_us_stamped_at_both_ends_keeps_the_closing_print():
    """Some vendors keep the opening and closing auction prints as bars: stamps from 09:30
    to the close itself (16:00, or 13:00 on an early close), one more than either label."""
    days = ["2012-11-19", "2012-11-20", "2012-11-21"]
    hist = _us_30min_left(days).append(pd.DatetimeIndex([f"{d} 16:00" for d in days])).sort_values()
    out = future_timestamps(hist, 8 + 2, exchange="XNYS")
    want = [
        *_us_30min_left(["2012-11-23"], {"2012-11-23": "13:00"}), pd.Timestamp("2012-11-23 13:00"),
    ]
    assert list(out[:8]) == want
    assert list(out[8:]) == list(pd.to_datetime(["2012-11-26 09:30", "2012-11-26 10:00"]))
    # without the prints in the history, bar start stays the label: no 13:00 stamp
    plain = future_timestamps(_us_30min_left(days), 8, exchange="XNYS")
    assert (
        plain[-1] == pd.Timestamp("2012-11-26 09:30")
        and pd.Timestamp("2012-11-23 13:00") not in plain
    )


def test_timezones_aware_and_naive_in_another_zone():
    hist = _us_30min_left(["2012-11-19", "2012-11-20", "2012-11-21"])
    aware = hist.tz_localize("America/New_York")
    out = future_timestamps(aware, 3, exchange="XNYS")
    assert str(out.tz) == "America/New_York" and out[0] == pd.Timestamp(
        "2012-11-23 09:30", tz="America/New_York"
    )
    utc_naive = aware.tz_convert("UTC").tz_localize(None)
    out = future_timestamps(utc_naive, 1, exchange="XNYS", timezone="UTC")
    assert out.tz is None and out[0] == pd.Timestamp("2012-11-23 14:30")


def test_extra_holidays_and_unknown_exchange(real_stamps):
    goog = real_stamps[GOOG]
    upto = goog[goog <= "2012-11-21"][-300:]
    out = future_timestamps(upto, 2, holidays=["2012-11-23"], exchange="XNAS")
    assert list(out) == list(pd.to_datetime(["2012-11-26", "2012-11-27"]))
    with pytest.raises(UnknownExchangeError, match="unknown exchange 'NOPE'"):
        future_timestamps(upto, 2, exchange="NOPE")


def test_history_off_the_exchange_hours_falls_back_to_the_template():
    """Hourly stamps at :00 around the clock do not sit on NYSE's 09:30 grid: the learned
    template is used, with the exchange's closures as holidays."""
    hist = pd.date_range("2012-11-12", "2012-11-21 23:00", freq="1h")
    hist = hist[hist.day_of_week < 5]
    out = future_timestamps(hist, 3, exchange="XNYS")
    assert list(out) == list(
        pd.to_datetime(["2012-11-23 00:00", "2012-11-23 01:00", "2012-11-23 02:00"])
    )


# Issue 17: the calendar was built for 1990-2035 only, and history outside it fell through
# without a word (1980 history got 1990 dates). It is now built over the range the history
# and horizon need, within the library's bounds; outside them a warning says so.


def test_daily_history_from_1980_gets_the_next_1980_and_1981_sessions_not_1990():
    hist = pd.bdate_range("1980-11-03", "1980-12-30")
    out = future_timestamps(hist, 3, exchange="XNYS")
    assert list(out) == list(pd.to_datetime(["1980-12-31", "1981-01-02", "1981-01-05"]))


def test_intraday_history_from_1980_continues_on_the_next_1980_session():
    hist = _us_30min_left(["1980-12-22", "1980-12-23", "1980-12-24"])
    out = future_timestamps(hist, 2, exchange="XNYS")  # Christmas (Thursday) closed
    assert list(out) == list(pd.to_datetime(["1980-12-26 09:30", "1980-12-26 10:00"]))


def test_off_hours_history_from_1980_takes_only_the_real_closures():
    """The learned-template fallback takes the exchange's closures as holidays: in 1980 those
    are the real ones, not every weekday before the calendar's first year."""
    hist = pd.date_range("1980-12-15", "1980-12-24 23:00", freq="1h")
    hist = hist[hist.day_of_week < 5]
    out = future_timestamps(hist, 3, exchange="XNYS")
    assert list(out) == list(
        pd.to_datetime(["1980-12-26 00:00", "1980-12-26 01:00", "1980-12-26 02:00"])
    )


def test_daily_horizon_past_the_default_range_follows_the_real_calendar():
    hist = pd.bdate_range("2035-11-01", "2035-12-28")
    out = future_timestamps(hist, 5, exchange="XNYS")  # 2036-01-01 is New Year's Day
    assert list(out) == list(pd.to_datetime(["2035-12-31", "2036-01-02", "2036-01-03", "2036-01-04",
                                             "2036-01-07"]))


def test_history_before_the_librarys_first_date_uses_the_template_and_says_so():
    from kronos_core.data import calendars

    hist = pd.bdate_range("1955-03-01", "1955-04-29")  # XHKG's calendar starts in 1960
    with pytest.warns(calendars.CalendarRangeWarning, match=r"XHKG.*1960-01-01"):
        out = future_timestamps(hist, 5, exchange="XHKG")
    assert list(out) == list(future_timestamps(hist, 5))


def test_daily_horizon_past_the_librarys_last_date_keeps_its_count_and_warns():
    import exchange_calendars as xcals

    from kronos_core.data import calendars

    end = xcals.get_calendar("XSHG").last_session  # Shanghai publishes a year at a time
    hist = pd.bdate_range(end - pd.Timedelta("60D"), end - pd.Timedelta("10D"))
    with pytest.warns(calendars.CalendarRangeWarning, match=rf"XSHG.*{end.date()}"):
        out = future_timestamps(hist, 30, exchange="XSHG")
    assert len(out) == 30 and out[0] > hist[-1] and out[-1] > end
    assert (out.asi8[1:] > out.asi8[:-1]).all() and (out.day_of_week < 5).all()
