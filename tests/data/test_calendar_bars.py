"""Future timestamps on exchange calendars (``kronos_core.data.calendar_bars``): holidays,
lunch breaks and early closes with no holiday list passed."""

from __future__ import annotations

import pandas as pd
import pytest

from kronos_core.data.calendars import UnknownExchangeError
from kronos_core.data.timestamps import future_timestamps

A_SHARE, GOOG = "kline_5min_a_share.csv", "goog_daily.csv"


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


def test_intraday_lunch_break_and_weekend_on_xshg(real_stamps):
    ts = real_stamps[A_SHARE]
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
    want = [*_us_30min_left(["2012-11-23"], {"2012-11-23": "13:00"}), pd.Timestamp("2012-11-23 13:00")]
    assert list(out[:8]) == want
    assert list(out[8:]) == list(pd.to_datetime(["2012-11-26 09:30", "2012-11-26 10:00"]))
    # without the prints in the history, bar start stays the label: no 13:00 stamp
    plain = future_timestamps(_us_30min_left(days), 8, exchange="XNYS")
    assert plain[-1] == pd.Timestamp("2012-11-26 09:30") and pd.Timestamp("2012-11-23 13:00") not in plain


def test_timezones_aware_and_naive_in_another_zone():
    hist = _us_30min_left(["2012-11-19", "2012-11-20", "2012-11-21"])
    aware = hist.tz_localize("America/New_York")
    out = future_timestamps(aware, 3, exchange="XNYS")
    assert str(out.tz) == "America/New_York" and out[0] == pd.Timestamp("2012-11-23 09:30", tz="America/New_York")
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
    assert list(out) == list(pd.to_datetime(["2012-11-23 00:00", "2012-11-23 01:00", "2012-11-23 02:00"]))
