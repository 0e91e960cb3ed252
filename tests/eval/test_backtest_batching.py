"""The backtest forecasts the windows of all rebalance dates together (issue 44) and gets the
same seeded paths, so the same scores and report, as one date per engine call."""

from __future__ import annotations

import numpy as np
import pytest
from fixture_paths import TINY

from kronos_core.eval.data import load_series
from kronos_core.eval.portfolio import (
    Universe,
    forecast_scores,
    forecast_scores_all,
    run_backtest,
    windows_per_call,
)
from kronos_core.loading import PredictorConfig, load_predictor


@pytest.fixture(scope="module")
def setup(real_dir):
    uni = Universe.from_series(load_series([real_dir / "goog_daily.csv",
                                            real_dir / "sp500_daily.csv"]))
    return uni, load_predictor(PredictorConfig(model=TINY, device="cpu"))


@pytest.mark.parametrize("rank, batch_size", [("return", 7), ("sharpe", 512)])
def test_batched_dates_give_the_per_date_scores(setup, rank, batch_size):
    uni, predictor = setup
    rows = list(range(300, 340, 3))  # 14 dates x 2 symbols; batch 7 splits dates across calls
    batched = forecast_scores_all(predictor, uni, rows, 32, 3, 4, rank, 5, batch_size)
    one_by_one = np.stack([forecast_scores(predictor, uni, r, 32, 3, 4, rank, 5) for r in rows])
    assert batched.shape == (len(rows), 2)
    assert np.isfinite(batched).all()
    # the same to float rounding: the candle decoder's products change shape with the batch
    # (issue 53's shared-history decode), about 1e-7 relative; the sampled tokens are the same
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-4, atol=1e-6)


def test_the_backtest_report_is_the_same_either_way(setup):
    uni, predictor = setup
    kw = dict(sample_count=4, start=str(uni.timestamps[400]), end=str(uni.timestamps[420]),
              seed=3, progress=False, cost_bps=5.0)
    now = run_backtest(predictor, uni, 32, 3, 2, 1, **kw)
    before = run_backtest(predictor, uni, 32, 3, 2, 1, per_date=True, **kw)
    assert now.rows == before.rows and len(now.rows) == 11
    _same_to_rounding(now.decisions, before.decisions)  # to float rounding, as above
    _same_to_rounding(now.performance, before.performance)


def _same_to_rounding(a, b) -> None:
    """Equal structures; numbers equal to 1e-4 relative or 1e-6 absolute (returns, scores)."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _same_to_rounding(a[k], b[k])
    elif isinstance(a, (list, tuple, np.ndarray)) and not isinstance(a, str):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_to_rounding(x, y)
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6, nan_ok=True)
    else:
        assert a == b


def test_engine_calls_are_sized_by_rows_and_the_memory_model(setup):
    """Without ``--batch-size``: 128 rows of windows x paths a call on a CPU; the predictor's
    memory model answers how many series fit a budget (what caps a GPU's calls)."""
    _, predictor = setup
    assert windows_per_call(predictor, 128, 5, sample_count=16) == 8
    assert windows_per_call(predictor, 128, 5, sample_count=500) == 1
    assert windows_per_call(predictor, 128, 5, sample_count=16, batch_size=3) == 3
    small = predictor.series_that_fit(64 << 20, 128, 5, sample_count=16)
    big = predictor.series_that_fit(1 << 30, 128, 5, sample_count=16)
    assert 0 < small < big and predictor.series_that_fit(1, 128, 5) == 0
    assert predictor.series_per_call(128, 5, sample_count=32) == 4  # what kronos eval takes
