"""No look-ahead: changing the data at and after each origin / decision time changes nothing
that was forecast or decided there."""

from __future__ import annotations

import numpy as np
import pandas as pd
from eval_helpers import damage_after, spliced_universe

from kronos_core.eval.data import Series
from kronos_core.eval.evaluate import baseline_samples
from kronos_core.eval.portfolio import Universe, forecast_scores, momentum_scores, run_backtest
from kronos_core.eval.regimes import classify
from kronos_core.eval.windows import build_windows, forecast_windows


def _goog(real_dir, rows=120) -> Series:
    from kronos_core.base.candles import candle_array

    df = pd.read_csv(real_dir / "goog_daily.csv", parse_dates=["timestamps"]).tail(rows)
    return Series("GOOG", candle_array(df), pd.DatetimeIndex(df["timestamps"]), "goog")


def test_eval_forecasts_ignore_data_after_each_origin(predictor, real_dir):
    s = _goog(real_dir)
    w = build_windows([s], lookback=32, horizon=3, windows=3, step=7)
    paths, _ = forecast_windows(predictor, w, 3, sample_count=4, seed=0, progress=False)
    base = baseline_samples(w, [5], 3)
    for j, origin in enumerate(w.origins):
        damaged = Series(
            s.name, damage_after(s.values, int(origin), seed=j), s.timestamps, s.source
        )
        w2 = build_windows([damaged], lookback=32, horizon=3, windows=3, step=7)
        assert (w2.origins == w.origins).all()
        assert not np.array_equal(w2.truth[j], w.truth[j])  # the future did change
        np.testing.assert_array_equal(w2.context[j], w.context[j])
        assert w2.future_ts[j].equals(w.future_ts[j])
        p2, _ = forecast_windows(
            predictor, w2.subset([j]), 3, sample_count=4, seed=0, progress=False
        )
        # the same sampled tokens; only float rounding of the batch-of-one differs
        np.testing.assert_allclose(p2[0], paths[j], rtol=1e-5)
        for name, samples in baseline_samples(w2.subset([j]), [5], 3).items():
            np.testing.assert_array_equal(samples[0], base[name][j])
        assert classify(w2.context[[j], :, 3])[0] == classify(w.context[[j], :, 3])[0]


def test_backtest_decisions_ignore_prices_after_each_decision(predictor):
    from kronos_core.base.candles import candle_array

    frames = spliced_universe(3, rows=80)
    series = [
        Series(f"S{k}", candle_array(f), pd.DatetimeIndex(f["timestamps"]), "t")
        for k, f in enumerate(frames)
    ]
    uni = Universe.from_series(series)
    kw = dict(
        lookback=24, horizon=2, rebalance=20, top=1, long_short=True, sample_count=2, progress=False
    )
    res = run_backtest(predictor, uni, **kw)
    assert len(res.decisions) >= 3
    for j, d in enumerate(res.decisions):
        r = d["row"]
        damaged = Universe(
            uni.names, np.stack([damage_after(v, r, seed=j) for v in uni.values]), uni.timestamps
        )
        scores = forecast_scores(predictor, damaged, r, 24, 2, 2)
        np.testing.assert_array_equal(scores, np.array(d["scores"]))
        np.testing.assert_array_equal(momentum_scores(damaged, r, 24), momentum_scores(uni, r, 24))
    # the whole backtest on data damaged after the last decision takes the same decisions
    last = res.decisions[-1]["row"]
    damaged = Universe(
        uni.names, np.stack([damage_after(v, last, seed=9) for v in uni.values]), uni.timestamps
    )
    res2 = run_backtest(predictor, damaged, **kw)
    assert [x["weights"] for x in res2.decisions] == [x["weights"] for x in res.decisions]
    assert [x["scores"] for x in res2.decisions] == [x["scores"] for x in res.decisions]
