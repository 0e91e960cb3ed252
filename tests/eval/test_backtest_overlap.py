"""The backtest's overlap error names the series that do not overlap, each with its span
(issue 26, item 10)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.eval.data import Series
from kronos_core.eval.portfolio import Universe


def _series(name: str, start: str, n: int, freq: str = "D") -> Series:
    ts = pd.date_range(start, periods=n, freq=freq)
    return Series(name, np.ones((n, 6), np.float32), ts, "test")


def test_disjoint_series_are_named_with_their_spans():
    series = [_series("OLD", "2020-01-01", 30), _series("MID", "2020-01-10", 60),
              _series("NEW", "2021-01-01", 30)]
    with pytest.raises(ValueError) as err:
        Universe.from_series(series)
    msg = str(err.value)
    old = "OLD (2020-01-01 00:00:00 .. 2020-01-30 00:00:00, 30 rows)"
    assert f"{old} ends before these start" in msg
    assert "NEW (2021-01-01 00:00:00 .. 2021-01-30 00:00:00, 30 rows)" in msg
    assert "MID (" not in msg  # MID overlaps OLD: not one of the culprits


def test_overlapping_spans_with_different_stamps_say_so():
    series = [_series("DAY", "2020-01-01", 30), _series("NOON", "2020-01-01 12:00", 30)]
    want = (r"spans overlap from 2020-01-01 12:00:00 to 2020-01-30 00:00:00.*"
            r"timestamps differ.*DAY \(.*NOON \(")
    with pytest.raises(ValueError, match=want):
        Universe.from_series(series)
