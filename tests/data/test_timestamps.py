"""``future_timestamps``, the public face (``kronos_core.data.timestamps``): its checks of the
history and what every path returns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.data.timestamps import future_timestamps


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


def test_future_stamps_increase_after_the_history(synthetic_cn_5min):
    """(Speed is a benchmark figure, not a test: ``kronos timestamps-holdout`` shows cuts/s.)"""
    hist = pd.DatetimeIndex(pd.to_datetime(synthetic_cn_5min["timestamps"]))[-512:]
    for exchange in (None, "XSHG"):
        out = future_timestamps(hist, 48, exchange=exchange)
        assert out[0] > hist[-1] and np.all(np.diff(out.asi8) > 0)
