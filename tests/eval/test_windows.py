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


class _CountingPredictor:
    """Random paths (B, S, H, 6); counts engine calls. ``sha``: the model identity's hash."""

    def __init__(self, sha: str):
        self.identity = type("Identity", (), {"sha256": sha})()
        self.calls = 0

    def forecast(self, arrays, x_ts, y_ts, options, *, price_limits=None):
        self.calls += 1
        rng = np.random.default_rng(self.calls)
        shape = (len(arrays), options.sample_count, options.horizon, 6)
        return type("R", (), {"paths": rng.uniform(1, 2, shape)})()


def test_paths_cache_reuses_only_the_same_windows_and_model(tmp_path):
    from types import SimpleNamespace

    from kronos_core.eval.runner import walk_forward

    ts = pd.bdate_range("2024-01-01", periods=60)
    s = Series("X", np.tile(np.arange(1, 61, dtype=np.float32)[:, None], (1, 6)), ts, "x")
    args = SimpleNamespace(
        lookback=10, horizon=3, windows=5, step=2, last_fraction=None, sample_count=4, seed=0,
        batch_size=8, paths_cache=tmp_path / "cache",
    )
    p = _CountingPredictor("aa")
    first = walk_forward(args, p, [s])
    again = walk_forward(args, p, [s])
    assert p.calls == 1 and len(list((tmp_path / "cache").glob("paths-*.npz"))) == 1
    np.testing.assert_array_equal(first.paths, again.paths)
    walk_forward(args, _CountingPredictor("bb"), [s])  # another model: forecast again
    changed = Series("X", s.values * 1.01, ts, "x")
    walk_forward(args, p, [changed])  # other context values: forecast again
    walk_forward(SimpleNamespace(**{**vars(args), "seed": 1}), p, [s])
    assert p.calls == 3 and len(list((tmp_path / "cache").glob("paths-*.npz"))) == 4
