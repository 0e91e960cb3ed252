"""`"summary": true`: each forecast carries its risk summary, computed from its own sample paths."""

import asyncio

import numpy as np
import pytest
from response_checks import assert_arrow_equals_json
from service_fakes import fake_gateway

from kronos_core.eval.risk import risk_summary
from service.common.answer import SymbolForecast
from service.common.schemas import ForecastRequest
from service.gateway.encode import answer_to_arrow, answer_to_json


def _gateway():
    return fake_gateway()[0]


@pytest.mark.parametrize("return_paths", [False, True])
def test_summary_matches_numpy_on_the_forecast_paths(return_paths):
    gw = _gateway()
    req = ForecastRequest(symbols=["S003", "S007"], horizon=3, sample_count=4, summary=True,
                          return_paths=return_paths, vol_alert_factor=3.0)
    out = asyncio.run(gw.forecast(req))
    body = answer_to_json(out)
    assert [f["symbol"] for f in body["forecasts"]] == ["S003", "S007"]
    for f, hist in zip(body["forecasts"], out.histories):
        SymbolForecast.model_validate(f)  # the schema accepts it
        assert ("paths" in f) == return_paths
        close = hist[:, 3].astype(np.float64)
        # the fake replica repeats the last candle
        paths = np.repeat(close[-1], 4 * 3).reshape(4, 3)
        want = risk_summary(paths, float(close[-1]), close, 3.0).to_dict()
        assert f["summary"] == pytest.approx(want, nan_ok=True)
        assert f["summary"]["var_95"] == pytest.approx(0.0) and f["summary"]["p_up"] == 0.0


def test_no_summary_unless_asked():
    out = asyncio.run(_gateway().forecast(ForecastRequest(symbols=["S001"], horizon=2)))
    assert "summary" not in answer_to_json(out)["forecasts"][0]


def test_arrow_summary_columns_hold_the_gateways_summaries():
    out = asyncio.run(
        _gateway().forecast(
            ForecastRequest(
                symbols=["S003", "S007"], horizon=3, sample_count=4, quantiles=[0.25, 0.75],
                summary=True,
            )
        )
    )
    assert out.summary and all(s is not None for s in out.summaries)
    table = assert_arrow_equals_json(
        answer_to_arrow(out), answer_to_json(out), (0.25, 0.75), summary=True
    )
    assert table.column("summary_realized_volatility").to_pylist()[::3] == [
        s["realized_volatility"] for s in out.summaries]
