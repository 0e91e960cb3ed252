"""Baselines, regimes and risk summaries against direct numpy computations."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from kronos_core.eval import baselines as b
from kronos_core.eval.regimes import classify, trend_score
from kronos_core.eval.risk import RISK_ARROW_SCHEMA, risk_summary, risk_table


def test_point_baselines_by_hand():
    history = np.array([[1.0, 2.0, 4.0, 3.0, 5.0]])
    np.testing.assert_allclose(b.last_value(history, 3)[0, 0], [5, 5, 5])
    np.testing.assert_allclose(b.drift(history, 2)[0, 0], [6, 7])  # slope (5 - 1) / 4
    np.testing.assert_allclose(b.seasonal_naive(history, 5, season=2)[0, 0], [3, 5, 3, 5, 3])


def test_hist_vol_bands_match_lognormal_quantiles():
    rng = np.random.default_rng(1)
    history = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, size=(2, 40)), axis=1))
    samples = b.hist_vol(history, 4, samples=2001)
    sigma = np.diff(np.log(history[:, -21:]), axis=1).std(axis=1, ddof=1)
    z90 = NormalDist().inv_cdf(0.9)
    expected = history[:, -1] * np.exp(sigma * np.sqrt(4) * z90)
    np.testing.assert_allclose(np.quantile(samples[:, :, 3], 0.9, axis=1), expected, rtol=1e-3)
    np.testing.assert_allclose(np.median(samples[:, :, 0], axis=1), history[:, -1], rtol=1e-9)


def test_season_length():
    daily = pd.bdate_range("2024-01-01", periods=60)
    assert b.season_length(daily) == 5
    hourly = pd.date_range("2024-01-01", periods=24 * 10, freq="h")
    assert b.season_length(hourly) == 24
    weekly = pd.date_range("2024-01-01", periods=30, freq="W")
    assert b.season_length(weekly) is None


def test_regimes():
    flat = np.ones(21) * 100
    up = 100 * np.exp(np.cumsum(np.r_[0, np.full(20, 0.01) + 0.001 * (-1) ** np.arange(20)]))
    down = up[0] ** 2 / up
    labels = classify(np.stack([flat, up, down]))
    assert list(labels) == ["sideways", "bull", "bear"]
    # by hand: trend = total log return / (std of returns * sqrt(20))
    r = np.diff(np.log(up))
    assert trend_score(up[None])[0] == pytest.approx(r.sum() / (r.std(ddof=1) * np.sqrt(20)))


def test_risk_summary_against_numpy():
    rng = np.random.default_rng(3)
    last = 50.0
    paths = last * np.exp(np.cumsum(rng.normal(0.001, 0.02, size=(400, 5)), axis=1))  # (S, H)
    history = np.exp(np.cumsum(rng.normal(0, 0.005, size=60)))
    history *= last / history[-1]
    s = risk_summary(paths, last, history, vol_factor=2.0)
    ret = paths[:, -1] / last - 1
    q = np.quantile(ret, 0.05)
    steps = np.diff(np.log(np.c_[np.full(400, last), paths]), axis=1)
    assert s.expected_return == pytest.approx(ret.mean())
    assert s.p_up == pytest.approx((ret > 0).mean())
    assert s.var_95 == pytest.approx(-q)
    assert s.es_95 == pytest.approx(-ret[ret <= q].mean())
    assert s.es_95 >= s.var_95
    assert s.volatility == pytest.approx(steps.std(ddof=1))
    realized = np.diff(np.log(history[-21:])).std(ddof=1)
    assert s.realized_volatility == pytest.approx(realized)
    assert s.vol_alert == (steps.std(ddof=1) > 2 * realized) and s.vol_alert  # 0.02 vs 0.005
    calm = risk_summary(paths, last, history, vol_factor=10.0)
    assert not calm.vol_alert
    table = risk_table(["X"], [s])
    assert table.schema == RISK_ARROW_SCHEMA and table.column("var_95")[0].as_py() == pytest.approx(
        -q
    )


def test_risk_summary_gives_p_ups_resolution_and_a_signed_var():
    """p_up comes with the number of paths it was counted from, and a VaR of paths that all
    gain is negative (a gain), as the schema documents (issue 26, item 11)."""
    from service.common.schemas import RiskSummaryOut

    up = 100.0 * np.exp(np.cumsum(np.full((20, 3), 0.01), axis=1))  # (S, H): 20 paths, all rising
    s = risk_summary(up, 100.0)
    assert s.p_up == 1.0 and s.sample_paths == 20 and s.var_95 < 0 and s.es_95 < 0
    assert risk_table(["X"], [s]).column("sample_paths")[0].as_py() == 20
    fields = RiskSummaryOut.model_fields
    assert "1/sample_paths" in fields["p_up"].description
    assert "negative" in fields["var_95"].description and "gain" in fields["var_95"].description


def test_risk_summary_refuses_non_positive_prices():
    with pytest.raises(ValueError, match="positive"):
        risk_summary(np.array([[1.0, -1.0]]), 1.0)


def test_summarize_a_forecast_result():
    from types import SimpleNamespace

    from kronos_core.eval.risk import summarize

    rng = np.random.default_rng(5)
    series = [np.abs(rng.normal(10, 1, size=(30, 6))) + 1 for _ in range(2)]
    paths = np.abs(rng.normal(10, 1, size=(2, 50, 4, 6))) + 1  # (B, S, H, 6)
    out = summarize(SimpleNamespace(paths=paths), series, vol_factor=1.5)
    for i in range(2):
        want = risk_summary(paths[i, :, :, 3], series[i][-1, 3], series[i][:, 3], vol_factor=1.5)
        assert out[i] == want
