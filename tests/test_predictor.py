"""KronosPredictor: reference parity on the fixtures, ragged batches, seeded sampling, input rules.

Parity runs on each fixture of ``parity`` (GOOG daily, bundled; the A-share cases, from the shared
folder); the other tests cut their windows from the bundled GOOG daily candles (``goog``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from series_helpers import windows

from kronos_core import KronosPredictor
from kronos_core.base.candles import FEATURES, CandleError
from kronos_core.base.options import ForecastOptions

GREEDY = dict(T=1.0, top_k=1, top_p=1.0, sample_count=1, verbose=False)


def _case_inputs(df, starts, lookback, horizon):
    dfs, xs, ys = [], [], []
    for s in starts:
        part = df.iloc[s : s + lookback + horizon]
        dfs.append(part.iloc[:lookback][list(FEATURES)].reset_index(drop=True))
        xs.append(part["timestamps"].iloc[:lookback].reset_index(drop=True))
        ys.append(part["timestamps"].iloc[lookback:].reset_index(drop=True))
    return dfs, xs, ys


CASES = ["fits_context", "slides_window", "full_context", "batch_of_4"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", ["predict", "predict_batch"])
def test_reference_parity(parity, case, method):
    c = parity.cases["cases"][case]
    starts = c.get("start_rows", [c.get("start_row")])
    dfs, xs, ys = _case_inputs(parity.candles, starts, c["lookback"], c["horizon"])
    predictor = KronosPredictor(parity.model, parity.tokenizer, device="cpu",
                                max_context=c["max_context"], clip=parity.cases["clip"])
    if method == "predict":
        got = [predictor.predict(d, x, y, c["horizon"], **GREEDY) for d, x, y in zip(dfs, xs, ys)]
    else:
        got = predictor.predict_batch(dfs, xs, ys, c["horizon"], **GREEDY)
    expected = np.array(c["expected"]).reshape(len(starts), c["horizon"], 6)
    for frame, exp, y in zip(got, expected, ys):
        assert list(frame.columns) == list(FEATURES)
        assert (frame.index == pd.Index(y)).all()
        np.testing.assert_allclose(frame.to_numpy(), exp, rtol=1e-4)


def test_recompute_mode_equals_cached(parity):
    """The reference's algorithm (full recompute each step) gives the same forecast as the cached
    engine."""
    c = parity.cases["cases"]["slides_window"]
    dfs, xs, ys = _case_inputs(parity.candles, [c["start_row"]], c["lookback"], c["horizon"])
    model = (parity.model, parity.tokenizer)
    cached = KronosPredictor(*model, device="cpu", max_context=c["max_context"])
    slow = KronosPredictor(*model, device="cpu", max_context=c["max_context"], sliding="recompute")
    a = cached.predict(dfs[0], xs[0], ys[0], c["horizon"], **GREEDY)
    b = slow.predict(dfs[0], xs[0], ys[0], c["horizon"], **GREEDY)
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


@pytest.mark.parametrize("max_context", [128, 60])
def test_ragged_batch_equals_singlewindows(tiny, goog, max_context):
    """Series with different lookbacks in one call: each equals its single-series result (greedy).

    With max_context 60 some rows slide and others do not, inside one batch.
    """
    predictor = KronosPredictor(*tiny, device="cpu", max_context=max_context)
    starts, lookbacks, horizon = [0, 300, 900, 1500, 2000], [20, 97, 50, 64, 33], 12
    values, xs, ys = windows(goog, starts, lookbacks, horizon)
    together = predictor.forecast(values, xs, ys, ForecastOptions(horizon, top_k=1))
    for i in range(len(values)):
        alone = predictor.forecast(
            values[i : i + 1], xs[i : i + 1], ys[i : i + 1], ForecastOptions(horizon, top_k=1)
        )
        np.testing.assert_allclose(together.mean[i], alone.mean[0], rtol=1e-5)


def test_ragged_batch_through_predict_batch(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    dfs, xs, ys = [], [], []
    for s, lb in [(10, 40), (500, 80)]:
        d, x, y = _case_inputs(goog, [s], lb, 8)
        dfs += d
        xs += x
        ys += y
    both = predictor.predict_batch(dfs, xs, ys, 8, **GREEDY)
    single = predictor.predict(dfs[0], xs[0], ys[0], 8, **GREEDY)
    np.testing.assert_allclose(both[0].to_numpy(), single.to_numpy(), rtol=1e-5)


def test_seeded_sampling_is_batch_invariant(tiny, goog):
    """A series' seeded sample paths do not depend on what shares the batch or on the batch size."""
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    values, xs, ys = windows(goog, [0, 400, 800, 1200], [64, 40, 90, 64], 10)
    kw = dict(sample_count=3, temperature=1.0, top_p=0.9, seed=1234)
    full = predictor.forecast(values, xs, ys, ForecastOptions(10, **kw))
    # the same series alone, and in another order with other company
    alone = predictor.forecast(values[2:3], xs[2:3], ys[2:3], ForecastOptions(10, **kw))
    shuffled = predictor.forecast(values[::-1], xs[::-1], ys[::-1], ForecastOptions(10, **kw))
    np.testing.assert_allclose(alone.paths[0], full.paths[2], rtol=1e-5)
    np.testing.assert_allclose(shuffled.paths[1], full.paths[2], rtol=1e-5)
    # sample paths differ from each other and a different seed changes them
    assert not np.allclose(full.paths[2, 0], full.paths[2, 1])
    other = predictor.forecast(
        values[2:3], xs[2:3], ys[2:3], ForecastOptions(10, **{**kw, "seed": 99})
    )
    assert not np.allclose(other.paths[0], alone.paths[0])


def test_same_seed_same_answer_and_unseeded_varies(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    values, xs, ys = windows(goog, [100], [64], 8)
    a = predictor.forecast(values, xs, ys, ForecastOptions(8, sample_count=4, seed=7))
    b = predictor.forecast(values, xs, ys, ForecastOptions(8, sample_count=4, seed=7))
    np.testing.assert_array_equal(a.paths, b.paths)
    c = predictor.forecast(values, xs, ys, ForecastOptions(8, sample_count=4))
    d = predictor.forecast(values, xs, ys, ForecastOptions(8, sample_count=4))
    assert not np.array_equal(c.paths, d.paths)


def test_forecast_shapes_mean_and_quantiles(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    values, xs, ys = windows(goog, [0, 600], [64, 48], 6)
    res = predictor.forecast(
        values, xs, ys, ForecastOptions(6, sample_count=5, seed=3, quantiles=(0.1, 0.5, 0.9))
    )
    assert res.paths.shape == (2, 5, 6, 6)
    assert res.mean.shape == (2, 6, 6)
    assert res.quantiles.shape == (3, 2, 6, 6)
    np.testing.assert_allclose(res.mean, res.paths.mean(axis=1), rtol=1e-4)
    np.testing.assert_allclose(res.quantiles[1], np.median(res.paths, axis=1), rtol=1e-5)
    assert (res.quantiles[0] <= res.quantiles[2] + 1e-6).all()
    assert res.stats.tokens_generated == 2 * 5 * 6


def test_repair_makes_candles_consistent(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    values, xs, ys = windows(goog, [0, 700, 1400], [64, 64, 64], 12)
    raw = predictor.forecast(values, xs, ys, ForecastOptions(12, sample_count=4, seed=5))
    fixed = predictor.forecast(
        values, xs, ys, ForecastOptions(12, sample_count=4, seed=5, repair=True)
    )
    p = fixed.paths
    assert (p[..., 1] >= np.maximum(p[..., 0], p[..., 3]) - 1e-6).all()
    assert (p[..., 2] <= np.minimum(p[..., 0], p[..., 3]) + 1e-6).all()
    assert (p[..., 4:] >= 0).all()
    # repair only moves what is inconsistent: open and close are untouched
    np.testing.assert_array_equal(p[..., [0, 3]], raw.paths[..., [0, 3]])


def test_input_rules_match_reference(tiny, goog):
    predictor = KronosPredictor(*tiny, device="cpu", max_context=128)
    d, x, y = _case_inputs(goog, [50], 64, 4)
    prices = d[0][["open", "high", "low", "close"]]
    # no volume: volume = amount = 0, same as passing zeros explicitly
    a = predictor.predict(prices, x[0], y[0], 4, **GREEDY)
    b = predictor.predict(prices.assign(volume=0.0, amount=0.0), x[0], y[0], 4, **GREEDY)
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    # volume without amount: amount = volume * mean(OHLC)
    vol = prices.assign(volume=d[0]["volume"])
    c = predictor.predict(vol, x[0], y[0], 4, **GREEDY)
    e = predictor.predict(
        vol.assign(amount=vol["volume"] * prices.mean(axis=1)), x[0], y[0], 4, **GREEDY
    )
    np.testing.assert_array_equal(c.to_numpy(), e.to_numpy())
    # NaN is rejected with a message that says so
    bad = d[0].copy()
    bad.loc[5, "close"] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        predictor.predict(bad, x[0], y[0], 4, **GREEDY)
    with pytest.raises(ValueError, match="price columns"):
        predictor.predict(d[0].drop(columns=["high"]), x[0], y[0], 4, **GREEDY)
    with pytest.raises(ValueError, match="future timestamps"):
        predictor.predict(d[0], x[0], y[0], 5, **GREEDY)
    with pytest.raises(CandleError, match="non-finite"):
        arr = d[0].to_numpy(np.float32)
        arr[3, 2] = np.inf
        predictor.forecast([arr], x, y, ForecastOptions(4))


def test_mismatched_tokenizer_is_rejected(tiny):
    from kronos_core.model import KronosTokenizer, TokenizerConfig

    model, tok = tiny
    other = KronosTokenizer(TokenizerConfig(**{**tok.config.to_dict(), "s2_bits": 8}))
    with pytest.raises(ValueError, match="bit widths"):
        KronosPredictor(model, other, device="cpu")
