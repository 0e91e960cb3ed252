"""KronosPredictor.forecast with daily price limits: every sampled path of a symbol with a rule
steps at most its band from the previous close (step 1: the last observed close), the mean and
quantiles are the limited paths', and a symbol without a rule is forecast exactly as before.

The tiny random-weight fixture model, sampled hot, wanders far beyond any band, so each test
also checks that the raw paths did step beyond it (the limit is what holds them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixture_paths import SHARED_CORPUS, shared_path

from kronos_core import KronosPredictor
from kronos_core.base.options import ForecastOptions
from kronos_core.base.price_limits import rule_for

HOT = dict(sample_count=48, temperature=3.0, top_p=1.0, seed=5)


@pytest.fixture(scope="module")
def predictor(tiny):
    return KronosPredictor(*tiny, device="cpu", max_context=64)


def _history(last_day: str, n: int, start: float, daily: float,
             noise: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(values (n, 6), stamps (n,)): daily candles whose close moves ``daily`` each weekday up to
    ``last_day`` (a run of limit-down days when ``daily`` is minus the limit), plus a seeded
    random move of standard deviation ``noise``."""
    stamps = pd.bdate_range(end=last_day, periods=n).to_numpy()
    moves = daily + np.random.default_rng(3).normal(0, noise, n) if noise else np.full(n, daily)
    close = start * np.cumprod(1 + np.clip(moves, -0.19, 0.19))  # (n,)
    prev = np.concatenate([[start], close[:-1]])
    values = np.stack([prev, np.maximum(prev, close) * 1.005, np.minimum(prev, close) * 0.995,
                       close, np.full(n, 1e6), close * 1e6], axis=1).astype(np.float32)
    return values, stamps


def _future(last_day: str, horizon: int) -> np.ndarray:
    return pd.bdate_range(pd.Timestamp(last_day) + pd.Timedelta(days=1), periods=horizon).to_numpy()


def _max_step(paths: np.ndarray, last: float) -> np.ndarray:
    """(H,) the largest |price / previous close - 1| of each step over paths and the four
    prices; paths (S, H, 6)."""
    close = paths[:, :, 3].astype(np.float64)  # (S, H)
    prev = np.concatenate([np.full((len(close), 1), last), close[:, :-1]], axis=1)  # (S, H)
    return np.abs(paths[:, :, :4] / prev[..., None] - 1).max(axis=(0, 2))  # (H,)


def _forecast(predictor, symbol, meta, values, stamps, future, **options):
    rule = rule_for(symbol, meta)
    opts = ForecastOptions(len(future), **{**HOT, **options})
    limited = predictor.forecast([values], [stamps], [future], opts, price_limits=[rule])
    raw = predictor.forecast([values], [stamps], [future], opts.with_(price_limits=False),
                             price_limits=[rule])
    return rule, limited, raw


def test_st_stock_after_limit_down_days_steps_at_most_5pct(predictor):
    values, stamps = _history("2019-06-21", 40, 8.0, -0.05)  # 40 limit-down days
    future = _future("2019-06-21", 6)
    rule, res, raw = _forecast(predictor, "600518.SH", {"special_treatment": True}, values,
                               stamps, future, quantiles=(0.1, 0.5, 0.9))
    last = float(values[-1, 3])
    assert _max_step(raw.paths[0], last).max() > 0.05  # unheld, the model steps beyond
    assert _max_step(res.paths[0], last).max() <= 0.05 + 1e-6
    np.testing.assert_array_equal(res.price_limits, [[0.05] * 6])
    assert rule.describe(res.price_limits[0], future) == "main board ST ±5%"
    # mean and quantiles are the limited paths'
    np.testing.assert_allclose(res.mean[0], res.paths[0].mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res.quantiles[:, 0], np.quantile(res.paths[0], (0.1, 0.5, 0.9),
                                                                axis=0), rtol=1e-5)
    assert res.quantiles[2, 0, -1, 3] <= last * 1.05 ** 6 * (1 + 1e-6)


@pytest.mark.parametrize("symbol, band", [("600000.SH", 0.10), ("000002.SZ", 0.10),
                                          ("688981.SH", 0.20)])
def test_main_board_and_star(predictor, symbol, band):
    values, stamps = _history("2021-06-04", 40, 10.0, 0.0, noise=0.12)
    future = _future("2021-06-04", 6)
    _rule, res, raw = _forecast(predictor, symbol, {}, values, stamps, future)
    last = float(values[-1, 3])
    assert _max_step(raw.paths[0], last).max() > band
    assert _max_step(res.paths[0], last).max() <= band + 1e-6
    # the band is used: some path goes beyond half of it
    assert _max_step(res.paths[0], last).max() > band / 2


def test_chinext_before_and_after_the_2020_08_24_reform(predictor):
    values, stamps = _history("2020-08-19", 40, 20.0, 0.0, noise=0.12)  # Wed 19 August
    future = _future("2020-08-19", 6)  # Thu 20, Fri 21 at 10%, then 24..27 at 20%
    rule, res, raw = _forecast(predictor, "300750.SZ", {}, values, stamps, future)
    np.testing.assert_array_equal(res.price_limits[0], [0.1, 0.1, 0.2, 0.2, 0.2, 0.2])
    steps, raw_steps = _max_step(res.paths[0], float(values[-1, 3])), _max_step(
        raw.paths[0], float(values[-1, 3]))
    assert (steps[:2] <= 0.10 + 1e-6).all() and (steps[2:] <= 0.20 + 1e-6).all()
    assert raw_steps[:2].max() > 0.10 and raw_steps[2:].max() > 0.20
    assert steps[2:].max() > 0.10  # after the reform the wider band is used
    assert "±10% 2020-08-20..2020-08-21" in rule.describe(res.price_limits[0], future)


def test_us_stock_has_no_rule_and_is_forecast_as_before(predictor):
    values, stamps = _history("2021-06-04", 40, 100.0, 0.0, noise=0.12)
    future = _future("2021-06-04", 5)
    assert rule_for("AAPL", {"exchange": "XNAS"}) is None
    opts = ForecastOptions(5, **HOT, quantiles=(0.1, 0.9))
    plain = predictor.forecast([values], [stamps], [future], opts)
    with_none = predictor.forecast([values], [stamps], [future], opts, price_limits=[None])
    assert with_none.price_limits is None
    for a, b in ((plain.paths, with_none.paths), (plain.mean, with_none.mean),
                 (plain.quantiles, with_none.quantiles)):
        np.testing.assert_array_equal(a, b)
    assert _max_step(plain.paths[0], float(values[-1, 3])).max() > 0.1  # nothing held it


def test_a_limited_series_leaves_its_batch_neighbours_exact(predictor):
    """A US series batched beside an ST one keeps its unlimited paths and mean: the same to
    float rounding (the candle decoder's products change shape with the batch, ~1e-7 relative),
    where a limit applied to it would move them by percent."""
    us, us_ts = _history("2021-06-04", 40, 100.0, 0.003)
    st, st_ts = _history("2021-06-04", 40, 5.0, -0.05)
    future = _future("2021-06-04", 5)
    opts = ForecastOptions(5, **HOT)
    alone = predictor.forecast([us], [us_ts], [future], opts)
    both = predictor.forecast([us, st], [us_ts, st_ts], [future, future], opts,
                              price_limits=[None, rule_for("600001.SH", {"special_treatment": 1})])
    np.testing.assert_allclose(both.paths[0], alone.paths[0], rtol=1e-5)
    np.testing.assert_allclose(both.mean[0], alone.mean[0], rtol=1e-5)
    assert _max_step(both.paths[1], float(st[-1, 3])).max() <= 0.05 + 1e-6


def test_rules_must_match_the_series(predictor):
    values, stamps = _history("2021-06-04", 20, 10.0, 0.0)
    with pytest.raises(ValueError, match="price_limits has 2 entries for 1 series"):
        predictor.forecast([values], [stamps], [_future("2021-06-04", 2)], ForecastOptions(2),
                           price_limits=[None, None])


@pytest.mark.slow
def test_600518_st_as_of_2019_06_21_median_within_five_limit_ups():
    """The issue's case: 600518.SH, special treatment on 2019-06-21 after weeks of limit-down
    days, forecast 5 days with the bundled default model. Unheld, its median 5-day close was
    about +55%; marked ST, five limit-up days (+27.6%) bound every path."""
    from kronos_core.data.timestamps import future_timestamps
    from kronos_core.loading import PredictorConfig, load_predictor

    corpus = shared_path(SHARED_CORPUS) / "candles-ashare-daily.parquet"
    df = pd.read_parquet(corpus, filters=[("symbol", "==", "600518.SH")]).sort_values("timestamps")
    df = df[df.timestamps <= "2019-06-21"]
    predictor = load_predictor(PredictorConfig(device="cpu"))
    hist = df.iloc[-(predictor.max_context - 5):]
    values = hist[["open", "high", "low", "close", "volume", "amount"]].to_numpy(np.float32)
    stamps = hist.timestamps.to_numpy()
    future = future_timestamps(pd.DatetimeIndex(df.timestamps), 5, exchange="XSHG").to_numpy()
    opts = ForecastOptions(5, sample_count=predictor.sampling.sample_count, seed=0)
    last = float(values[-1, 3])
    st = predictor.forecast([values], [stamps], [future], opts,
                            price_limits=[rule_for("600518.SH", {"special_treatment": True})])
    # the paths as sampled: no limit, nor the model's move correction (which shrinks the centre)
    raw = predictor.forecast([values], [stamps], [future],
                             opts.with_(price_limits=False, move_correction=False))
    median = np.median(st.paths[0, :, -1, 3]) / last - 1
    assert median <= 1.05 ** 5 - 1 + 1e-6
    assert st.paths[0, :, -1, 3].max() / last - 1 <= 1.05 ** 5 - 1 + 1e-6
    assert np.median(raw.paths[0, :, -1, 3]) / last - 1 > 1.05 ** 5 - 1  # what the limit fixed
