import json
import math

import pytest
from pydantic import ValidationError

from service.common.schemas import MAX_HORIZON, MAX_SYMBOLS, ForecastRequest


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
    assert r.n_series == 2 and r.lookback is None and r.quantiles == []
    assert r.sample_count is None and r.paths == 1  # unset: the model's, filled by the gateway


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
    assert ForecastRequest.model_validate(
        {"symbols": ["A"], "horizon": 2, "quantiles": [0.9, 0.1, 0.5]}
    ).quantiles == [0.1, 0.5, 0.9]


@pytest.mark.parametrize("bad", [None, "NaN", float("nan"), float("inf")])
def test_missing_candle_values_pass_the_schema_for_a_per_series_error(bad):
    # the legacy column form: null / "NaN" / NaN / inf are kept as non-finite values; the gateway
    # reports that series in errors (tests/service/test_hostile_input.py) and forecasts the rest
    r = ForecastRequest.model_validate({"series": [_series(close=[1.0, bad, 2.0])], "horizon": 2})
    assert not math.isfinite(r.series[0].candles[1][4])


def test_nan_literal_in_raw_json_reaches_the_series():
    # Python's json (used by FastAPI) accepts the non-standard NaN literal
    body = json.loads(
        '{"series": [{"symbol": "X", "candles": [["2024-01-01", 1, 1, 1, 1], ["2024-01-02", NaN, '
        '2, 1, 2]]}], "horizon": 1}'
    )
    assert math.isnan(ForecastRequest.model_validate(body).series[0].candles[1][1])


def test_series_length_mismatch_and_non_numbers_named():
    assert "high has 2 values but timestamps has 3" in _err(
        series=[_series(high=[1, 2])], horizon=1
    )
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
    body = json.loads(
        '{"series": [{"symbol": "X", "candles": [["2024-01-01", 1, 2, 0.5, 1.5, 10, 15],'
        ' ["2024-01-02", 1, 2, 0.5, null, 10, 15], ["2024-01-03", null, 2, 0.5, 1.5]]}], '
        '"horizon": 1}'
    )
    rows = ForecastRequest.model_validate(body).series[0].candles
    assert rows[1][4] is None and rows[2][1] is None and len(rows[1]) == 7 and len(rows[2]) == 5
    schema = ForecastRequest.model_json_schema()
    for alt in schema["$defs"]["InlineSeries"]["properties"]["candles"]["items"]["anyOf"]:
        for value in alt["prefixItems"][1:]:
            assert {"type": "null"} in value["anyOf"] and {"type": "number"} in value["anyOf"]


@pytest.mark.parametrize(
    "over, field",
    [
        ({"repair": 0}, "repair"), ({"summary": "true"}, "summary"),
        ({"return_paths": 1}, "return_paths"), ({"horizon": "5"}, "horizon"),
        ({"horizon": True}, "horizon"), ({"temperature": "1.5"}, "temperature"),
        ({"seed": "7"}, "seed"), ({"lookback": "64"}, "lookback"),
        ({"quantiles": ["0.5"]}, "quantiles"), ({"as_of": 0}, "as_of"),
    ],
)
def test_a_value_of_another_json_type_than_the_schema_says_is_refused(over, field):
    # pydantic's lax mode read these ("5" as 5, 0 as false, 0 as 1970): Schemathesis saw a
    # schema-violating body accepted. A body the schema refuses is a 422 naming the field
    body = {"symbols": ["A"], "horizon": 2, **over}
    with pytest.raises(ValidationError) as info:
        ForecastRequest.model_validate(body)
    assert info.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize("position, value", [(0, 0), (0, 1.7e9), (1, "1.5"), (4, True), (6, "NaN")])
def test_a_candle_value_of_another_json_type_is_refused_naming_row_and_position(position, value):
    row = ["2024-01-02", 1.0, 2.0, 0.5, 1.5, 10.0, 15.0]
    row[position] = value
    body = {
        "series": [{"symbol": "X", "candles": [["2024-01-01", 1, 2, 0.5, 1.5, 10, 15], row]}],
        "horizon": 1,
    }
    assert f"candles[1][{position}] should be" in _err(**body)


def test_integral_numbers_and_python_values_are_still_read():
    # JSON Schema counts 5.0 as an integer; Python callers may pass datetimes and numpy numbers
    from datetime import datetime

    import numpy as np

    r = ForecastRequest.model_validate(
        {"symbols": ["A"], "horizon": 5.0, "seed": 3.0, "as_of": datetime(2024, 1, 1)}
    )
    assert (r.horizon, r.seed) == (5, 3)
    rows = [
        [datetime(2024, 1, 1), np.float32(1), 2, 0.5, 1.5],
        [datetime(2024, 1, 2), np.float64(1), 2, 0.5, 1.5],
    ]
    assert (
        ForecastRequest.model_validate(
            {"series": [{"symbol": "X", "candles": rows}], "horizon": 1}
        ).n_series
        == 1
    )


def test_every_integer_bound_of_the_schema_is_exact_in_a_double():
    # a seed bound of 2^63 - 1 is 2^63 as a double: Schemathesis generated 2^63 + 191 as a valid
    # seed (its doubles said so) and the server refused it. Bounds stay at most 2^53 - 1
    from service.common.schemas import MAX_JSON_INTEGER

    def bounds(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in (
                    "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum",
                ) and isinstance(value, int):
                    yield value
                else:
                    yield from bounds(value)
        elif isinstance(node, list):
            for item in node:
                yield from bounds(item)

    found = list(bounds(ForecastRequest.model_json_schema()))
    assert 512 in found and all(abs(b) <= MAX_JSON_INTEGER for b in found), max(found)
    assert (
        ForecastRequest.model_validate(
            {"symbols": ["A"], "horizon": 1, "seed": MAX_JSON_INTEGER}
        ).seed
        == 2**53 - 1
    )
    assert "seed" in _err(symbols=["A"], horizon=1, seed=MAX_JSON_INTEGER + 1)


def test_record_is_a_json_boolean_and_query_times_are_iso_text():
    """Schemathesis found ``"record": 0`` and ``/v1/accuracy?since=0.5`` accepted (lax mode)."""
    from service.common.schemas import iso_datetime_text

    with pytest.raises(ValidationError, match="record"):
        ForecastRequest(symbols=["A"], horizon=2, record=0)
    assert ForecastRequest(symbols=["A"], horizon=2, record=False).record is False
    for number in ("0.5", "17", " -3e2 ", ".5"):
        with pytest.raises(ValueError, match="ISO 8601"):
            iso_datetime_text(number)
    assert iso_datetime_text("2024-03-01T09:30:00Z") == "2024-03-01T09:30:00Z"


def test_unset_sampling_fields_take_the_models_and_the_path_limit_is_checked_after():
    from service.common.schemas import ForecastRequest

    req = ForecastRequest.model_validate({"symbols": ["A", "B"], "horizon": 3})
    assert (req.sample_count, req.temperature, req.top_p) == (None, None, None)
    filled = req.with_sampling_defaults({"sample_count": 32, "temperature": 0.8, "top_p": 1.0})
    assert (filled.sample_count, filled.temperature, filled.top_p) == (32, 0.8, 1.0)
    assert filled.paths == 32
    assert req.with_sampling_defaults(None).sample_count == 1  # a model without a block
    own = ForecastRequest.model_validate({"symbols": ["A"], "horizon": 3, "sample_count": 2,
                                          "temperature": 1.3})
    kept = own.with_sampling_defaults({"sample_count": 32, "temperature": 0.8, "top_p": 1.0})
    assert (kept.sample_count, kept.temperature, kept.top_p) == (2, 1.3, 1.0)
    # 5,010,000 values of paths: refused only once the model's sample count is known
    many = ForecastRequest.model_validate({"symbols": [f"S{i}" for i in range(100)],
                                           "horizon": 501, "return_paths": True})
    assert many.too_many_paths() is None
    assert "5,000,000" in many.with_sampling_defaults({"sample_count": 100}).too_many_paths()


def test_the_schemas_date_pattern_admits_exactly_the_years_the_service_takes():
    """Issue 52: a date outside the store's years is a 422, and the schema says so with a
    pattern on the text, so that a client or a fuzzer following the schema never sends one."""
    import re
    from datetime import datetime

    from pydantic import ValidationError

    from service.common.schemas import STORE_YEARS_PATTERN, ForecastRequest

    for year in range(1, 10000):
        text = f"{year:04d}-06-01T00:00:00"
        try:
            ForecastRequest(symbols=["S"], horizon=1, as_of=text)
            taken = True
        except ValidationError:
            taken = False
        assert taken == bool(re.match(STORE_YEARS_PATTERN, text)), year
    assert ForecastRequest(symbols=["S"], horizon=1, as_of="2261-12-31T23:59:59").as_of == (
        datetime(2261, 12, 31, 23, 59, 59)
    )
