"""Session-aware future timestamps, checked by hold-out on the real files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import US_INTRADAY_MSFT

from kronos_core.data.timestamps import (
    future_timestamps,
    holdout_hit_rate,
    infer_frequency,
    learn_sessions,
    missing_trading_days,
    short_session_days,
)

A_SHARE, GOOG, EURUSD, SPX = (
    "kline_5min_a_share.csv",
    "goog_daily.csv",
    "eurusd_hourly.csv",
    "sp500_daily.csv",
)
FX_CLOCK = dict(timezone="UTC", session_timezone="America/New_York")


def test_infer_frequency(real_stamps):
    assert infer_frequency(real_stamps[A_SHARE]) == "5min"
    assert infer_frequency(real_stamps[EURUSD]) == "1h"
    assert infer_frequency(real_stamps[GOOG]) == "1d"
    assert infer_frequency(pd.date_range("2020-01-31", periods=12, freq="ME")) == "1mo"
    assert infer_frequency(pd.date_range("2020-01-03", periods=12, freq="W-FRI")) == "1w"


def test_a_share_lunch_night_and_weekend(real_stamps):
    ts = real_stamps[A_SHARE]
    # history ending at the morning close (Monday 2024-07-15 11:30)
    upto = ts[ts <= "2024-07-15 11:30"]
    nxt = future_timestamps(upto[-500:], 3)
    assert list(nxt) == list(
        pd.to_datetime(["2024-07-15 13:05", "2024-07-15 13:10", "2024-07-15 13:15"])
    )
    # Friday close -> Monday open, no night or weekend candles
    upto = ts[ts <= "2024-07-19 15:00"]
    nxt = future_timestamps(upto[-500:], 49)
    assert nxt[0] == pd.Timestamp("2024-07-22 09:35")
    assert nxt[-1] == pd.Timestamp("2024-07-23 09:35")
    assert not ((nxt.hour == 12) | (nxt.hour < 9) | (nxt.hour > 15)).any()
    assert set(nxt.day_of_week) <= {0, 1, 2, 3, 4}
    assert nxt.equals(ts[(ts > "2024-07-19 15:00")][:49])


def test_fx_week_and_daily_holidays(real_stamps):
    ts = real_stamps[EURUSD]
    upto = ts[ts <= "2017-06-16 20:00"]  # Friday's last summer candle (UTC)
    nxt = future_timestamps(upto[-512:], 2, **FX_CLOCK)
    assert list(nxt) == list(
        pd.to_datetime(["2017-06-18 21:00", "2017-06-18 22:00"])
    )  # Sunday open
    goog = real_stamps[GOOG]
    upto = goog[goog <= "2012-11-21"]  # Thanksgiving Thursday 2012-11-22 is closed
    no_cal = future_timestamps(upto[-300:], 2)
    with_cal = future_timestamps(upto[-300:], 2, holidays=["2012-11-22"])
    assert list(no_cal) == list(pd.to_datetime(["2012-11-22", "2012-11-23"]))
    assert list(with_cal) == list(pd.to_datetime(["2012-11-23", "2012-11-26"]))
    assert list(with_cal) == list(goog[goog > "2012-11-21"][:2])


def test_learned_template(real_stamps):
    tpl = learn_sessions(real_stamps[A_SHARE].asi8)
    assert tpl.traded_weekdays == (0, 1, 2, 3, 4) and len(tpl.offsets) == 5 * 48
    tpl = learn_sessions(real_stamps[GOOG].asi8)
    assert tpl.traded_weekdays == (0, 1, 2, 3, 4) and len(tpl.offsets) == 5


def test_tz_aware_history_and_errors():
    idx = pd.date_range("2024-03-04 09:30", periods=40, freq="30min", tz="America/New_York")
    idx = idx[(idx.hour >= 9) & (idx.hour < 16)]
    out = future_timestamps(idx, 3)
    assert str(out.tz) == "America/New_York" and out[0] > idx[-1]
    with pytest.raises(ValueError):
        future_timestamps(idx[:1], 3)
    with pytest.raises(ValueError):
        future_timestamps(idx[::-1], 3)
    with pytest.raises(ValueError):
        future_timestamps(idx.tz_localize(None), 3, session_timezone="UTC")  # naive needs timezone=
    assert len(future_timestamps(idx, 0)) == 0


def test_monthly():
    idx = pd.date_range("2020-01-31", periods=12, freq="ME")
    out = future_timestamps(idx, 3)
    assert list(out) == list(pd.to_datetime(["2021-01-31", "2021-02-28", "2021-03-31"]))


def test_calendar_helpers(real_stamps):
    miss = missing_trading_days(real_stamps[GOOG])
    assert pd.Timestamp("2004-09-06") in miss  # Labor Day
    assert (
        pd.Timestamp("2012-10-29") in miss and pd.Timestamp("2012-10-30") in miss
    )  # hurricane Sandy
    assert not (miss.day_of_week >= 5).any()
    assert len(missing_trading_days(real_stamps[A_SHARE])) == 0
    assert list(
        short_session_days(
            real_stamps[EURUSD],
        ).strftime("%Y-%m-%d")
    ) == ["2017-12-25", "2018-01-01"]


# Hold-out protocol (docs/store.md), leak-free: for cuts every STRIDE candles, predict the
# next HORIZON timestamps from the 512 before the cut, with no holiday list and no cut left
# out; equities give their exchange, FX its New York session clock.
EXCHANGE_CASES = [
    (A_SHARE, 48, "XSHG"),
    (GOOG, 20, "XNAS"),
    (SPX, 20, "XNYS"),
]


@pytest.mark.parametrize("name,horizon,exchange", EXCHANGE_CASES, ids=["a_share_5min", "goog_1d", "spx_1d"])
def test_holdout_with_exchange_calendar_no_holiday_list(real_stamps, name, horizon, exchange):
    r = holdout_hit_rate(real_stamps[name], horizon, lookback=512, stride=17, exchange=exchange)
    assert r.cuts > 80 and r.excluded_cuts == 0
    assert r.rate >= 0.995 and r.window_rate >= 0.99, (name, r)


@pytest.fixture(scope="module")
def msft_1min() -> pd.DatetimeIndex:
    """Real US 1-minute stamps (tests/fixtures/us-intraday): six NYSE sessions around a
    weekend, 09:30 to 16:00 with the closing print, 391 bars a day."""
    return pd.DatetimeIndex(pd.to_datetime(pd.read_csv(US_INTRADAY_MSFT)["timestamps"]))


def test_us_intraday_fixture_is_six_whole_sessions_with_a_weekend(msft_1min):
    per_day = pd.Series(1, index=msft_1min).groupby(msft_1min.date).sum()
    assert list(per_day) == [391] * 6
    assert str(per_day.index[0]) == "2016-04-29" and str(per_day.index[1]) == "2016-05-02"  # Fri, Mon
    assert msft_1min[0] == pd.Timestamp("2016-04-29 09:30") and msft_1min[-1] == pd.Timestamp("2016-05-06 16:00")


@pytest.mark.parametrize("horizon", [1, 30, 391])
def test_holdout_us_intraday_real_1min_no_holiday_list(msft_1min, horizon):
    """US intraday on real data: the exchange grid must carry the 16:00 closing print the
    vendor stamps as a bar of its own, and skip the weekend."""
    r = holdout_hit_rate(msft_1min, horizon, lookback=512, stride=7, exchange="XNYS")
    assert r.cuts > 190 and r.excluded_cuts == 0
    assert r.rate >= 0.995 and r.window_rate >= 0.99, r


def test_us_intraday_closing_print_and_weekend(msft_1min):
    fri = msft_1min[msft_1min <= "2016-04-29 16:00"]  # Friday's whole session, 391 stamps
    before_close = msft_1min[msft_1min <= "2016-05-03 15:59"][-512:]
    assert future_timestamps(before_close, 2, exchange="XNYS").equals(
        pd.DatetimeIndex(["2016-05-03 16:00", "2016-05-04 09:30"]))
    assert future_timestamps(fri, 1, exchange="XNYS")[0] == pd.Timestamp("2016-05-02 09:30")


def test_holdout_fx_learned_template_no_holiday_list(real_stamps):
    """FX has no exchange: the learned template on the New York clock. Christmas and New
    Year's short sessions and two odd Friday candles cost about 1% (documented)."""
    r = holdout_hit_rate(real_stamps[EURUSD], 24, lookback=512, stride=7, **FX_CLOCK)
    assert r.cuts > 600 and r.excluded_cuts == 0
    assert 0.985 <= r.rate < 1.0, r


def test_holdout_daily_without_exchange_is_reported_not_hidden(real_stamps):
    """What users got before exchange calendars: holidays are missed (docs/store.md)."""
    r = holdout_hit_rate(real_stamps[GOOG], 20, lookback=512, stride=17)
    with_cal = holdout_hit_rate(real_stamps[GOOG], 20, lookback=512, stride=17, exchange="XNAS")
    assert r.rate < 0.9 and with_cal.rate > r.rate


def test_holdout_leaky_options_read_the_future(real_stamps):
    """``use_holidays`` passes the series' own missing days: near perfect without a calendar,
    which is why the default is leak-free."""
    leaky = holdout_hit_rate(real_stamps[GOOG], 20, lookback=512, stride=17, use_holidays=True)
    assert leaky.rate >= 0.99


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,horizon,exchange",
    [*EXCHANGE_CASES, (A_SHARE, 96, "XSHG"), (GOOG, 5, "XNAS"), (SPX, 60, "XNYS")],
    ids=["a_share", "goog", "spx", "a_share_h96", "goog_h5", "spx_h60"],
)
def test_holdout_every_cut(real_stamps, name, horizon, exchange):
    r = holdout_hit_rate(real_stamps[name], horizon, lookback=512, stride=1, exchange=exchange)
    assert r.rate >= 0.995, (name, r)


def test_future_stamps_increase_after_the_history(real_stamps):
    """(Speed is a benchmark figure, not a test: ``kronos timestamps-holdout`` shows cuts/s.)"""
    hist = real_stamps[A_SHARE][-512:]
    for exchange in (None, "XSHG"):
        out = future_timestamps(hist, 48, exchange=exchange)
        assert out[0] > hist[-1] and np.all(np.diff(out.asi8) > 0)


@pytest.mark.slow
def test_holdout_fx_longer_horizon(real_stamps):
    """Two Fridays of the FX file carry an extra 21:00 UTC candle and the holiday weeks
    have short sessions; every cut within the horizon before them loses the rest of its
    window, so the rate falls with the horizon: 97.79% at 48 hours, every cut, no holiday
    list (docs/store.md)."""
    r = holdout_hit_rate(real_stamps[EURUSD], 48, lookback=512, stride=1, **FX_CLOCK)
    assert r.rate >= 0.97, r
