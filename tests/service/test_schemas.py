import json
import math

import pytest
from pydantic import ValidationError

from service.schemas import MAX_HORIZON, MAX_SYMBOLS, ForecastRequest


def _series(**over):
    s = {
        "symbol": "X",
        "timestamps": ["2024-01-01T00:00:00", "2024-01-01T01:00:00", "2024-01-01T02:00:00"],
        "open": [1, 2, 3], "high": [2, 3, 4], "low": [0.5, 1, 2], "close": [1.5, 2.5, 3.5],
    }
    s.update(over)
    return s


def _err(**body) -> str:
    with pytest.raises(ValidationError) as ei:
        ForecastRequest.model_validate(body)
    return str(ei.value)


def test_minimal_symbols_request_defaults():
    r = ForecastRequest.model_validate({"symbols": ["A", "B"], "horizon": 5})
    assert r.n_series == 2 and r.sample_count == 1 and r.lookback is None and r.quantiles == []


@pytest.mark.parametrize("horizon", [0, -1, MAX_HORIZON + 1])
def test_impossible_horizon_names_field(horizon):
    assert "horizon" in _err(symbols=["A"], horizon=horizon)


def test_too_many_symbols_names_field():
    msg = _err(symbols=[f"S{i}" for i in range(MAX_SYMBOLS + 1)], horizon=1)
    assert "symbols" in msg and str(MAX_SYMBOLS) in msg


def test_exactly_one_source():
    assert "exactly one of symbols or series" in _err(horizon=3)
    assert "exactly one of symbols or series" in _err(symbols=["A"], series=[_series()], horizon=3)


def test_duplicate_symbols_rejected():
    assert "repeated" in _err(symbols=["A", "B", "A"], horizon=3)


@pytest.mark.parametrize("q", [0.0, 1.0, 1.5, -0.1])
def test_quantiles_strictly_inside_unit_interval(q):
    assert "quantiles.0" in _err(symbols=["A"], horizon=2, quantiles=[q])


def test_quantiles_sorted():
    assert ForecastRequest.model_validate({"symbols": ["A"], "horizon": 2, "quantiles": [0.9, 0.1, 0.5]}).quantiles == [0.1, 0.5, 0.9]


@pytest.mark.parametrize("bad", [None, "NaN", float("nan"), float("inf")])
def test_missing_candle_values_pass_the_schema_for_a_per_series_error(bad):
    # the legacy column form: null / "NaN" / NaN / inf are kept as non-finite values; the gateway
    # reports that series in errors (tests/service/test_hostile_input.py) and forecasts the rest
    r = ForecastRequest.model_validate({"series": [_series(close=[1.0, bad, 2.0])], "horizon": 2})
    assert not math.isfinite(r.series[0].candles[1][4])


def test_nan_literal_in_raw_json_reaches_the_series():
    # Python's json (used by FastAPI) accepts the non-standard NaN literal
    body = json.loads('{"series": [{"symbol": "X", "candles": [["2024-01-01", 1, 1, 1, 1], ["2024-01-02", NaN, 2, 1, 2]]}],'
                      ' "horizon": 1}')
    assert math.isnan(ForecastRequest.model_validate(body).series[0].candles[1][1])


def test_series_length_mismatch_and_non_numbers_named():
    assert "high has 2 values but timestamps has 3" in _err(series=[_series(high=[1, 2])], horizon=1)
    assert "low[1] = 'x' is not a number" in _err(series=[_series(low=[1, "x", 2])], horizon=1)


def test_valid_inline_series_coerces_numbers():
    r = ForecastRequest.model_validate({"series": [_series(close=["1.5", 2, 3.25])], "horizon": 2})
    assert [row[4] for row in r.series[0].candles] == [1.5, 2.0, 3.25]
    assert all(len(row) == 5 for row in r.series[0].candles)  # no volume column: 5-wide rows


def test_extra_fields_rejected():
    assert "horizn" in _err(symbols=["A"], horizon=1, horizn=3)


def test_null_in_a_candle_row_passes_the_schema_for_a_per_series_error():
    # JSON has no NaN: pandas' to_json writes a missing value as null. The row keeps it (the
    # gateway names it: "close[1] is null"), and the schema says a value may be null
    body = json.loads('{"series": [{"symbol": "X", "candles": [["2024-01-01", 1, 2, 0.5, 1.5, 10, 15],'
                      ' ["2024-01-02", 1, 2, 0.5, null, 10, 15], ["2024-01-03", null, 2, 0.5, 1.5]]}], "horizon": 1}')
    rows = ForecastRequest.model_validate(body).series[0].candles
    assert rows[1][4] is None and rows[2][1] is None and len(rows[1]) == 7 and len(rows[2]) == 5
    schema = ForecastRequest.model_json_schema()
    for alt in schema["$defs"]["InlineSeries"]["properties"]["candles"]["items"]["anyOf"]:
        for value in alt["prefixItems"][1:]:
            assert {"type": "null"} in value["anyOf"] and {"type": "number"} in value["anyOf"]
