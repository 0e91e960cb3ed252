"""Window origins by hand: counted back from the end, step apart, inside start/end/last_fraction."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kronos_core.eval.data import Series
from kronos_core.eval.windows import build_windows, origins_for


def test_origins_by_hand():
    # 20 rows, lookback 5, horizon 3: the last origin is 17 (truth rows 17, 18, 19)
    assert origins_for(20, 5, 3, 3, 4).tolist() == [9, 13, 17]
    assert origins_for(20, 5, 3, 10, 4).tolist() == [5, 9, 13, 17]  # none before the lookback
    assert origins_for(20, 5, 3, 10, 4, first=10).tolist() == [13, 17]
    assert origins_for(20, 5, 3, 10, 4, stop=15).tolist() == [8, 12]  # truths end before row 15


def test_build_windows_split_is_disjoint():
    ts = pd.bdate_range("2024-01-01", periods=100)
    vals = np.tile(np.arange(1, 101, dtype=np.float32)[:, None], (1, 6))
    s = Series("X", vals, ts, "x")
    split = ts[80]
    cal = build_windows([s], 10, 3, 100, 2, end=split, last_fraction=0.4)
    hold = build_windows([s], 10, 3, 100, 2, start=split)
    assert cal.origins.min() >= 60 and (cal.origins + 3).max() <= 80
    assert hold.origins.min() >= 80 and hold.origins.max() == 97
    # contexts are the rows before each origin, truths the rows from it
    j = 0
    o = int(hold.origins[j])
    np.testing.assert_array_equal(hold.context[j, :, 3], np.arange(o - 9, o + 1))
    np.testing.assert_array_equal(hold.truth[j, :, 3], np.arange(o + 1, o + 4))
