"""Hand-written hostile requests against the live service (what generators miss): huge
numbers and arrays, deep nesting, wrong content types and encodings, unicode and path-like
symbols, NaN and infinity, unordered or repeated timestamps. Every answer is a documented
status; none is a 5xx; no answer carries a server path."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

HUGE = 718585340041150607352922112  # the offset that once answered 500
SMALL = {"lookback": 32, "horizon": 2, "sample_count": 1}  # one path: not the model's 32


def _rows(n=40, close=50.0):
    return [
        [f"2024-03-{1 + h // 24:02d}T{h % 24:02d}:00:00", close, close + 1, close - 1, close, 100.0]
        for h in range(n)
    ]


def _documented(openapi: dict, path: str, method: str) -> set[int]:
    return {int(c) for c in openapi["paths"][path][method]["responses"]}


@pytest.fixture(scope="module")
def openapi(live_service):
    return live_service.client.get("/openapi.json").json()


@pytest.mark.parametrize("params", [
    {"limit": 10, "offset": HUGE}, {"limit": HUGE}, {"limit": -HUGE}, {"offset": -1},
    {"limit": "1e400"}, {"offset": "NaN"},
])
def test_symbol_pages_with_out_of_range_integers_are_422(live_service, openapi, params):
    r = live_service.client.get("/v1/symbols", params=params)
    assert r.status_code == 422, r.text[:300]
    assert 422 in _documented(openapi, "/v1/symbols", "get")


def test_last_symbol_page_offset_is_fine(live_service):
    r = live_service.client.get("/v1/symbols", params={"limit": 10, "offset": 2**31 - 1})
    assert r.status_code == 200 and r.json()["symbols"] == []


@pytest.mark.parametrize(
    "field", ["horizon", "lookback", "sample_count", "top_k", "seed", "temperature", "top_p"]
)
def test_integers_beyond_64_bits_in_every_numeric_field_are_422(live_service, field):
    for value in (HUGE, -HUGE, 10**400):
        raw = f'{{"symbols": ["AAA"], "horizon": 2, "{field}": {value}}}'
        if field == "horizon":
            raw = f'{{"symbols": ["AAA"], "horizon": {value}}}'
        r = live_service.client.post(
            "/v1/forecast", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422 and field in r.text, (field, value, r.text[:300])


def test_integers_beyond_64_bits_in_candles_and_quantiles_are_422(live_service):
    c = live_service.client
    big = 10**400
    for raw in (
        f'{{"symbols": ["AAA"], "horizon": 2, "quantiles": [{HUGE}]}}',
        f'{{"series": [{{"symbol": "X", "candles": [["2024-01-01", {big}, 1, 1, 1], ["2024-01-02", '
        f'1, 1, 1, 1]]}}], "horizon": '
        '1}',
        f'{{"series": [{{"symbol": "X", "candles": [[{HUGE}, 1, 1, 1, 1], [{HUGE + 1}, 1, 1, 1, '
        f'1]]}}], "horizon": '
        '1}',
    ):
        r = c.post("/v1/forecast", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw[:80], r.text[:300])


@pytest.mark.parametrize("body, content_type", [
    # FastAPI's own answer would be an undocumented 400
    (b"\xff\xfe{not utf-8", "application/json"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json"),  # deeper than the JSON parser goes
    (b'{"symbols": ["AAA"], "horizon": 2}', "text/plain"),
    (b'{"symbols": ["AAA"], "horizon": 2}', "application/x-www-form-urlencoded"),
    (b"", "application/json"),
    (b"null", "application/json"),
    (b'{"symbols": ["AAA"], "horizon": ', "application/json"),
])
def test_unreadable_bodies_are_documented_422(live_service, openapi, body, content_type):
    r = live_service.client.post(
        "/v1/forecast", content=body, headers={"content-type": content_type}
    )
    assert r.status_code == 422, r.text[:300]
    assert r.status_code in _documented(openapi, "/v1/forecast", "post")
    assert isinstance(r.json()["detail"], list) and r.json()["detail"][0]["msg"]


def test_deep_nesting_inside_a_field_is_422(live_service):
    nested = "[" * 5000 + "]" * 5000
    raw = '{"symbols": ' + nested + ', "horizon": 2}'
    r = live_service.client.post(
        "/v1/forecast", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422


def test_huge_arrays_are_422_naming_the_field(live_service):
    c = live_service.client
    r = c.post(
        "/v1/forecast", json={"series": [{"symbol": "X", "candles": _rows(100_001)}], "horizon": 1}
    )
    assert r.status_code == 422 and "candles" in r.text
    r = c.post(
        "/v1/forecast",
        json={"symbols": ["A"], "horizon": 2, "quantiles": [i / 100 for i in range(1, 40)]},
    )
    assert r.status_code == 422 and "quantiles" in r.text


def test_unicode_and_path_like_symbols_are_per_symbol_errors(live_service):
    good = live_service.store.symbols()[:2]
    odd = [
        "../../etc/passwd", "/etc/passwd", "..", "AAPL\x00", "株式", "🚀", "a" * 65, "C:\\x",
        "%2e%2e%2f", " ",
    ]
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": [good[0], *odd, good[1]], **SMALL}
    )
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == good
    assert [e["symbol"] for e in body["errors"]] == odd
    assert {e["code"] for e in body["errors"]} <= {"invalid_symbol", "unknown_symbol"}


def test_no_server_paths_in_answers(live_service):
    c = live_service.client
    store_dir = live_service.settings.store_dir
    body = c.post("/v1/forecast", json={"symbols": ["NO_SUCH_SYMBOL"], **SMALL}).json()
    msg = body["errors"][0]["message"]
    assert body["errors"][0]["code"] == "unknown_symbol"
    assert store_dir not in msg and "/" not in msg, msg
    for text in (c.get("/v1/models").text, c.get("/readyz").text, json.dumps(body["model"])):
        assert (
            store_dir not in text
            and "/root/" not in text
            and "/home/" not in text
            and "/work/" not in text
        )


def test_nan_infinity_and_bad_timestamps_are_per_series_errors(live_service):
    bad_nan = _rows()
    bad_nan[5][4] = float("nan")
    bad_inf = _rows()
    bad_inf[7][2] = float("inf")
    unordered = _rows()
    unordered[10], unordered[11] = unordered[11], unordered[10]
    dup = _rows()
    dup[12][0] = dup[11][0]
    series = [{"symbol": "GOOD", "candles": _rows()}, {"symbol": "NAN", "candles": bad_nan},
              {"symbol": "INF", "candles": bad_inf}, {"symbol": "UNORDERED", "candles": unordered},
              {"symbol": "DUP", "candles": dup}]
    # json.dumps writes NaN / Infinity literals, which Python's parser (FastAPI's) accepts
    raw = json.dumps({"series": series, "horizon": 2, "seed": 1})
    r = live_service.client.post(
        "/v1/forecast", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == ["GOOD"]
    errors = {e["symbol"]: e for e in body["errors"]}
    assert list(errors) == ["NAN", "INF", "UNORDERED", "DUP"]
    assert {e["code"] for e in errors.values()} == {"invalid_series"}
    assert "close[5] is NaN" in errors["NAN"]["message"]
    assert "high[7]" in errors["INF"]["message"]
    assert (
        "timestamps[11]" in errors["UNORDERED"]["message"]
        and "timestamps[12]" in errors["DUP"]["message"]
    )
    # nothing valid: still an answer (as for store symbols), no forecasts and every series in errors
    raw = json.dumps({"series": series[1:], "horizon": 2})
    r = live_service.client.post(
        "/v1/forecast", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text[:300]
    assert r.json()["forecasts"] == []
    assert [(e["symbol"], e["code"]) for e in r.json()["errors"]] == [
        (s, "invalid_series") for s in ("NAN", "INF", "UNORDERED", "DUP")]
    only = live_service.client.post("/v1/forecast", json={"series": [series[4]], "horizon": 2})
    assert only.status_code == 200 and only.json()["forecasts"] == []
    assert (
        "series[0]: timestamps must be strictly increasing" in only.json()["errors"][0]["message"]
    )


def test_a_null_value_is_one_series_error_and_the_others_are_forecast(live_service):
    # JSON has no NaN: pandas' to_json writes a missing value as null
    gap = _rows()
    gap[3][4] = None
    series = [{"symbol": "GOOD", "candles": _rows()}, {"symbol": "GAP", "candles": gap}]
    r = live_service.client.post("/v1/forecast", json={"series": series, "horizon": 2, "seed": 1})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == ["GOOD"]
    assert [(e["symbol"], e["code"]) for e in body["errors"]] == [("GAP", "invalid_series")]
    assert body["errors"][0]["message"].startswith("series[1]: close[3] is null")


def test_rows_and_legacy_columns_forecast_alike(live_service):
    rows = _rows()
    legacy = {
        "symbol": "X", "timestamps": [r[0] for r in rows], "open": [r[1] for r in rows],
        "high": [r[2] for r in rows], "low": [r[3] for r in rows], "close": [r[4] for r in rows],
        "volume": [r[5] for r in rows],
    }
    a = live_service.client.post(
        "/v1/forecast", json={"series": [{"symbol": "X", "candles": rows}], "horizon": 3, "seed": 4}
    )
    b = live_service.client.post("/v1/forecast", json={"series": [legacy], "horizon": 3, "seed": 4})
    assert a.status_code == b.status_code == 200
    assert a.json()["forecasts"] == b.json()["forecasts"]


@pytest.mark.parametrize("value", ["null", "0.5", "x"])
def test_a_deadline_header_outside_its_schema_is_422_naming_the_header(live_service, value):
    # the schema says a number in [1, 86400], never null (headers are text: "null" is no number)
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": live_service.store.symbols()[:1], "horizon": 2},
        headers={"X-Kronos-Timeout-S": value},
    )
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["loc"] == ["header", "x-kronos-timeout-s"]
