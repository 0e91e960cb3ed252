"""The learned session template (``kronos_core.data.sessions``): frequencies, lunch breaks,
nights, weekends, FX's New York clock and monthly steps, on the real files (the A-share one from
the shared folder) and the sample store's synthetic Shanghai-style calendar."""

from __future__ import annotations

import pandas as pd
from data_helpers import EURUSD, FX_CLOCK, GOOG

from kronos_core.data.sessions import infer_frequency, learn_sessions
from kronos_core.data.timestamps import future_timestamps


def _stamps(frame) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(frame["timestamps"])).as_unit("ns")


def test_infer_frequency(real_stamps, synthetic_cn_5min):
    assert infer_frequency(_stamps(synthetic_cn_5min)) == "5min"
    assert infer_frequency(real_stamps[EURUSD]) == "1h"
    assert infer_frequency(real_stamps[GOOG]) == "1d"
    assert infer_frequency(pd.date_range("2020-01-31", periods=12, freq="ME")) == "1mo"
    assert infer_frequency(pd.date_range("2020-01-03", periods=12, freq="W-FRI")) == "1w"


def test_a_share_lunch_night_and_weekend(a_share_stamps):
    ts = a_share_stamps
    assert infer_frequency(ts) == "5min"
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


def test_learned_template(real_stamps, synthetic_cn_5min):
    tpl = learn_sessions(_stamps(synthetic_cn_5min).asi8)  # 09:35-11:30, 13:05-15:00: 48 a day
    assert tpl.traded_weekdays == (0, 1, 2, 3, 4) and len(tpl.offsets) == 5 * 48
    tpl = learn_sessions(real_stamps[GOOG].asi8)
    assert tpl.traded_weekdays == (0, 1, 2, 3, 4) and len(tpl.offsets) == 5


def test_learned_template_of_the_a_share_file(a_share_stamps):
    tpl = learn_sessions(a_share_stamps.asi8)
    assert tpl.traded_weekdays == (0, 1, 2, 3, 4) and len(tpl.offsets) == 5 * 48


def test_monthly():
    idx = pd.date_range("2020-01-31", periods=12, freq="ME")
    out = future_timestamps(idx, 3)
    assert list(out) == list(pd.to_datetime(["2021-01-31", "2021-02-28", "2021-03-31"]))


def test_a_sparse_history_learns_the_weekdays_it_has():
    """No weekday carries candles on half its dates (one candle every 9 days): the weekdays seen
    are traded instead of none (which crashed kronos tune-moves on a corpus series)."""
    import numpy as np
    import pandas as pd

    from kronos_core.data.sessions import learn_sessions
    from kronos_core.data.timestamps import future_timestamps

    idx = pd.date_range("2018-01-01", periods=40, freq="9D")
    ts = idx.values.astype("datetime64[ns]").astype(np.int64)
    template = learn_sessions(ts)
    assert set(template.traded_weekdays) == set(idx.dayofweek)
    future = future_timestamps(idx, 3)
    assert len(future) == 3 and future[0] > idx[-1] and future.is_monotonic_increasing
