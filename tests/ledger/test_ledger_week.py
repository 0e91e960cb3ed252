"""A simulated trading week through the library: forecast a portfolio every day with a real
(tiny, random-weight) predictor, record the answers, append each day's real candles, score.
The scores and the accuracy summary agree with a direct computation with kronos eval's
metric functions on the same forecasts and truths, and no step is scored before its candle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import ForecastOptions
from kronos_core.data.sample_store import REAL_DIR
from kronos_core.data.store import KlineStore
from kronos_core.eval import metrics as m
from kronos_core.ledger import ForecastRecord, Ledger, accuracy, score
from kronos_core.predictor import KronosPredictor

H, LEVELS, HISTORY, DAYS = 3, (0.1, 0.5, 0.9), 120, 5


def _frame(name: str) -> pd.DataFrame:
    f = pd.read_csv(REAL_DIR / name, parse_dates=["timestamps"])
    if "amount" not in f:
        f["amount"] = f["close"] * f["volume"]
    return f[["timestamps", *FEATURES]].reset_index(drop=True)


def test_a_week_of_forecasts_recorded_and_scored(tmp_path, tiny):
    frames = {"GOOG": _frame("goog_daily.csv").iloc[-(HISTORY + DAYS + H):].reset_index(drop=True),
              "SPX": _frame("sp500_daily.csv").iloc[-(HISTORY + DAYS + H):].reset_index(drop=True)}
    store = KlineStore(tmp_path / "store", "1d")
    for s, f in frames.items():
        store.write(s, f.iloc[:HISTORY], frequency="1d")
    ledger = Ledger(tmp_path / "ledger", writer_id="week")
    predictor = KronosPredictor(*tiny, device="cpu", max_context=64)
    options = ForecastOptions(horizon=H, sample_count=8, seed=7, quantiles=LEVELS)
    # (request, symbol) -> (mean close (H,), quantiles close (Q, H), origin close, step rows)
    made = {}
    for day in range(DAYS):
        cut = HISTORY + day  # candles known this morning
        store.clear_cache()
        hist = {s: store.read(s) for s in frames}
        assert all(len(h) == cut for h in hist.values())
        series = [h[list(FEATURES)].to_numpy(np.float64)[-64:] for h in hist.values()]
        x_ts = [h.timestamps.to_numpy()[-64:] for h in hist.values()]
        # the market's next days
        y_ts = [f.timestamps.to_numpy()[cut:cut + H] for f in frames.values()]
        res = predictor.forecast(series, x_ts, y_ts, options)
        recs = []
        for b, s in enumerate(frames):
            recs.append(
                ForecastRecord(
                    request_id=f"day{day}", symbol=s, origin=x_ts[b][-1], timestamps=y_ts[b],
                    mean=res.mean[b], quantiles=res.quantiles[:, b], levels=LEVELS,
                    model_sha256="0" * 64, model_name="tiny", frequency="1d",
                )
            )
            made[(f"day{day}", s)] = (
                res.mean[b, :, 3].astype(np.float64), res.quantiles[:, b, :, 3].astype(np.float64),
                float(series[b][-1, 3]), cut,
            )
        ledger.record(recs)
        for s, f in frames.items():  # the day's real candle arrives after the close
            store.write(s, f.iloc[cut:cut + 1], frequency="1d")
        store.clear_cache()
        result = score(ledger, store)
        # no look-ahead: exactly the steps whose day has been appended are scored
        for row in result.scores.to_pylist():
            assert made[(row["request_id"], row["symbol"])][3] + row["horizon_step"] <= cut + 1
        expected = sum(min(H, cut + 1 - made[k][3]) for k in made)
        assert len(ledger.read_scores()) == expected
    scores = ledger.read_scores().to_pandas()
    assert not scores[["request_id", "symbol", "horizon_step"]].duplicated().any()
    # a direct computation with eval's metric functions on the same forecasts and truths
    crps, cov, ae = [], [], []
    for row in scores.itertuples():
        mean, q, _last, cut = made[(row.request_id, row.symbol)]
        h = row.horizon_step - 1
        truth = np.array([[frames[row.symbol].close.iloc[cut + h]]])  # (1, 1)
        assert row.truth_close == pytest.approx(truth[0, 0])
        pin = [
            m.pinball_elements(q[i, h : h + 1][None], truth, lv)[0, 0]
            for i, lv in enumerate(LEVELS)
        ]
        crps.append(2 * np.mean(pin))
        cov.append(m.covered(q[0, h:h + 1][None], q[2, h:h + 1][None], truth)[0, 0])
        ae.append(m.abs_errors(mean[h:h + 1][None], truth)[0, 0])
        assert row.crps == pytest.approx(crps[-1], rel=1e-6)
        assert row.abs_error == pytest.approx(ae[-1], rel=1e-6)
    summary = accuracy(ledger)
    assert summary["all_time"]["scored"] == len(scores)
    assert summary["all_time"]["crps"] == pytest.approx(np.mean(crps), rel=1e-6)
    assert summary["all_time"]["mae"] == pytest.approx(np.mean(ae), rel=1e-6)
    assert summary["all_time"]["coverage"]["0.8"] == pytest.approx(np.mean(cov))
    assert accuracy(ledger, symbol="GOOG", horizon_step=1)["all_time"]["scored"] == DAYS
