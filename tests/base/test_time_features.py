"""``time_features``: the calendar fields by numpy's arithmetic equal pandas' field look-ups for
any timestamps: decades before 1970, every datetime unit, time zones (the zone's wall clock),
NaT."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.base.candles import time_features


def _pandas_fields(stamps) -> np.ndarray:
    idx = pd.DatetimeIndex(stamps.values if isinstance(stamps, pd.Series) else stamps)
    return np.stack(
        [idx.minute, idx.hour, idx.day_of_week, idx.day, idx.month], axis=-1
    ).astype(np.float32)


def test_random_instants_from_1890_to_2096_in_every_unit():
    rng = np.random.default_rng(0)
    idx = pd.DatetimeIndex(rng.integers(-2_500_000_000, 4_000_000_000, 20_000) * 10**9 + 123)
    for unit in ("ns", "us", "ms", "s"):
        stamps = idx.as_unit(unit)
        got = time_features(stamps)
        assert got.dtype == np.float32 and got.shape == (20_000, 5)
        np.testing.assert_array_equal(got, _pandas_fields(stamps))


def test_a_daily_series_from_the_sixties_and_a_minute_grid_across_new_year():
    days = pd.Series(pd.date_range("1960-01-01", periods=800, freq="D"))
    np.testing.assert_array_equal(time_features(days), _pandas_fields(days))
    minutes = pd.date_range("1969-12-31 23:00", "1970-01-01 01:00", freq="min")
    np.testing.assert_array_equal(time_features(minutes), _pandas_fields(minutes))
    assert time_features(minutes)[60].tolist() == [0, 0, 3, 1, 1]  # 1970-01-01 00:00, Thursday


def test_time_zones_read_the_wall_clock_of_their_zone():
    utc = pd.date_range("2020-03-01", "2020-11-30", freq="37min", tz="UTC")
    for zone in ("Asia/Shanghai", "America/New_York"):
        local = utc.tz_convert(zone)
        np.testing.assert_array_equal(time_features(local), _pandas_fields(local))
    assert time_features(utc.tz_convert("Asia/Shanghai")[:1])[0].tolist() == [0, 8, 6, 1, 3]


def test_nat_gives_nan_fields_as_pandas_does():
    stamps = pd.DatetimeIndex([pd.Timestamp("2021-06-30 09:31"), pd.NaT])
    got = time_features(stamps)
    assert got[0].tolist() == [31, 9, 2, 30, 6] and np.isnan(got[1]).all()
