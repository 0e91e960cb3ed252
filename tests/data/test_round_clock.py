"""Round-the-clock calendars (``kronos_core.data.round_clock``): ``24/7`` and ``24/5`` as
``exchange``, and the 24/7 pattern the store infers from a series' whole history (issue 44: a
5-minute crypto series stored without an exchange was stamped days ahead, its sessions guessed
from the 251 candles read)."""

import numpy as np
import pandas as pd
import pytest

from kronos_core.data.round_clock import infer_round_clock, round_clock_future
from kronos_core.data.store import KlineStore
from kronos_core.data.timestamps import calendar_of, future_options, future_timestamps
from tests.data.crypto_helpers import crypto_frame


def test_24_7_steps_on_at_the_history_step_through_the_weekend():
    hist = pd.date_range("2018-02-02 20:00", periods=251, freq="5min")  # into Saturday
    out = future_timestamps(hist, 4, exchange="24/7")
    assert list(out) == list(hist[-1] + pd.Timedelta("5min") * np.arange(1, 5))


def test_24_5_skips_the_fx_weekend_on_new_york_time():
    # Friday 2017-11-03: FX closes 17:00 New York = 21:00 UTC (EDT); reopens Sunday 17:00 New
    # York = 22:00 UTC (EST, daylight saving ended on the 5th)
    hist = pd.date_range("2017-11-03 18:00", "2017-11-03 20:00", freq="1h")  # UTC, naive
    out = future_timestamps(hist, 3, exchange="24/5", timezone="UTC")
    assert list(out) == [pd.Timestamp("2017-11-05 22:00"), pd.Timestamp("2017-11-05 23:00"),
                         pd.Timestamp("2017-11-06 00:00")]
    days = pd.bdate_range("2017-10-02", "2017-11-03")  # daily bars: weekdays only
    assert list(round_clock_future(days, 2, "24/5")) == [pd.Timestamp("2017-11-06"),
                                                        pd.Timestamp("2017-11-07")]


def test_a_short_window_alone_would_stamp_the_forecast_days_ahead():
    """The bug, and why the whole history must decide: 251 five-minute candles (under a day)
    give a template without the weekend; on the inferred 24/7 the next stamp is 5 minutes on."""
    hist = pd.date_range("2018-01-26 04:00", periods=251, freq="5min")  # Friday, into the night
    guessed = future_timestamps(hist, 1)[0]
    assert guessed - hist[-1] > pd.Timedelta("1h")  # the old guess: not the next bar
    whole = crypto_frame(days=11)["timestamps"]
    assert infer_round_clock(whole) == "24/7"
    assert future_timestamps(hist, 1, exchange="24/7")[0] == hist[-1] + pd.Timedelta("5min")


@pytest.mark.parametrize("stamps, why", [
    (pd.date_range("2018-01-01", periods=251, freq="5min"), "less than a week"),
    (pd.bdate_range("2018-01-01", periods=400), "daily"),
    (pd.DatetimeIndex([t for t in pd.date_range("2018-01-01", "2018-01-31", freq="1h")
                       if t.day_of_week < 5]), "no weekend"),
])
def test_only_a_series_that_trades_every_bar_of_the_week_is_called_24_7(stamps, why):
    assert infer_round_clock(stamps) is None, why


def test_the_store_records_the_inferred_24_7_and_drops_it_for_an_exchange(tmp_path):
    store = KlineStore(tmp_path / "store")
    meta = store.write("ADA-BTC", crypto_frame(), frequency="5min", timezone="UTC")
    assert meta["sessions"] == "24/7" and "exchange" not in meta
    assert calendar_of(meta) == "24/7"
    assert future_options(meta) == {"exchange": "24/7", "timezone": "UTC"}
    meta = store.write("ADA-BTC", crypto_frame(days=1), frequency="5min",
                       extra_metadata={"exchange": "XNYS"})  # a named exchange rules
    assert "sessions" not in meta and calendar_of(meta) == "XNYS"
