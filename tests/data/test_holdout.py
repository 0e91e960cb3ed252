"""The hold-out check (``kronos_core.data.holdout``) of future timestamps on the real files,
its calendar helpers and its command. The A-share (XSHG) and MSFT 1-minute (US intraday) files
are read from the shared folder: those tests skip when it is absent."""

from __future__ import annotations

import pandas as pd
import pytest
from data_helpers import EURUSD, FX_CLOCK, GOOG, SPX, real_path

from kronos_core.data.holdout import holdout_hit_rate, missing_trading_days, short_session_days
from kronos_core.data.timestamps import future_timestamps


def test_calendar_helpers(real_stamps):
    miss = missing_trading_days(real_stamps[GOOG])
    assert pd.Timestamp("2004-09-06") in miss  # Labor Day
    assert (
        pd.Timestamp("2012-10-29") in miss and pd.Timestamp("2012-10-30") in miss
    )  # hurricane Sandy
    assert not (miss.day_of_week >= 5).any()
    assert list(
        short_session_days(
            real_stamps[EURUSD],
        ).strftime("%Y-%m-%d")
    ) == ["2017-12-25", "2018-01-01"]


# Hold-out protocol (docs/store.md), leak-free: for cuts every STRIDE candles, predict the
# next HORIZON timestamps from the 512 before the cut, with no holiday list and no cut left
# out; equities give their exchange, FX its New York session clock.
EXCHANGE_CASES = [
    (GOOG, 20, "XNAS"),
    (SPX, 20, "XNYS"),
]


@pytest.mark.parametrize("name,horizon,exchange", EXCHANGE_CASES, ids=["goog_1d", "spx_1d"])
def test_holdout_with_exchange_calendar_no_holiday_list(real_stamps, name, horizon, exchange):
    r = holdout_hit_rate(real_stamps[name], horizon, lookback=512, stride=17, exchange=exchange)
    assert r.cuts > 80 and r.excluded_cuts == 0
    assert r.rate >= 0.995 and r.window_rate >= 0.99, (name, r)


def test_holdout_a_share_5min_on_xshg_no_holiday_list(a_share_stamps):
    """China intraday (lunch break, stamped at the close) on the real A-share file."""
    assert len(missing_trading_days(a_share_stamps)) == 0
    r = holdout_hit_rate(a_share_stamps, 48, lookback=512, stride=17, exchange="XSHG")
    assert r.cuts > 80 and r.excluded_cuts == 0
    assert r.rate >= 0.995 and r.window_rate >= 0.99, r


def test_us_intraday_file_is_six_whole_sessions_with_a_weekend(msft_1min):
    per_day = pd.Series(1, index=msft_1min).groupby(msft_1min.date).sum()
    assert list(per_day) == [391] * 6
    # Fri, Mon
    assert str(per_day.index[0]) == "2016-04-29" and str(per_day.index[1]) == "2016-05-02"
    assert msft_1min[0] == pd.Timestamp("2016-04-29 09:30") and msft_1min[-1] == pd.Timestamp(
        "2016-05-06 16:00"
    )


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
    [*EXCHANGE_CASES, (GOOG, 5, "XNAS"), (SPX, 60, "XNYS")],
    ids=["goog", "spx", "goog_h5", "spx_h60"],
)
def test_holdout_every_cut(real_stamps, name, horizon, exchange):
    r = holdout_hit_rate(real_stamps[name], horizon, lookback=512, stride=1, exchange=exchange)
    assert r.rate >= 0.995, (name, r)


@pytest.mark.slow
@pytest.mark.parametrize("horizon", [48, 96])
def test_holdout_every_cut_a_share(a_share_stamps, horizon):
    r = holdout_hit_rate(a_share_stamps, horizon, lookback=512, stride=1, exchange="XSHG")
    assert r.rate >= 0.995, r


@pytest.mark.slow
def test_holdout_fx_longer_horizon(real_stamps):
    """Two Fridays of the FX file carry an extra 21:00 UTC candle and the holiday weeks
    have short sessions; every cut within the horizon before them loses the rest of its
    window, so the rate falls with the horizon: 97.79% at 48 hours, every cut, no holiday
    list (docs/store.md)."""
    r = holdout_hit_rate(real_stamps[EURUSD], 48, lookback=512, stride=1, **FX_CLOCK)
    assert r.rate >= 0.97, r


def test_holdout_command_prints_figures_per_series_and_horizon(tmp_path, capsys):
    from kronos_core.cli import main

    csv = tmp_path / "goog.csv"
    pd.read_csv(real_path(GOOG)).tail(700).to_csv(csv, index=False)
    assert main(["timestamps-holdout", str(csv), "--exchange", "XNAS", "--horizons", "1,5",
                 "--stride", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "series", "frequency", "exchange", "horizon", "cuts", "dates_right", "windows_right",
    ]
    rows = [ln.split() for ln in lines[1:]]
    assert [r[3] for r in rows] == ["1", "5"] and all(r[2] == "XNAS" and r[4] == "4" for r in rows)
    assert all(r[5] == "100.00%" for r in rows)
