"""Issue 52 over HTTP, on the bundled sample store: a symbol whose data stops 10 sessions before
the request's as_of (GOOG, whose file ends 2013-03-01, beside SPX at 2013-03-15) gets a ``stale``
warning naming its last candle and the sessions missed, the others none, and ``exclude_stale``
leaves it out and lists it; one far behind a portfolio of current symbols is stale without an
as_of; the model's default window is no ``history_cut``, a lookback the caller asked and the
series cannot give is; a date outside the store's years is a 422 on every route taking one."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

AS_OF = "2013-03-15"  # a Friday; GOOG's last stored candle is Friday 2013-03-01
SMALL = {"horizon": 2, "sample_count": 2, "seed": 1, "record": False}


def _warnings(body: dict) -> dict[str, list[str]]:
    return {f["symbol"]: [w["code"] for w in f["warnings"]] for f in body["forecasts"]}


def test_a_symbol_ten_sessions_behind_is_stale_and_can_be_left_out(live_service):
    c = live_service.client
    req = {"symbols": ["SPX", "GOOG"], "as_of": AS_OF, **SMALL}
    r = c.post("/v1/forecast", json=req)
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert _warnings(body) == {"SPX": [], "GOOG": ["stale"]}
    (stale,) = [f for f in body["forecasts"] if f["symbol"] == "GOOG"][0]["warnings"]
    assert stale["message"].startswith(
        "last candle 2013-03-01 00:00:00: 10 sessions missed up to the request's as_of "
        "2013-03-15 00:00:00"
    ), stale["message"]
    assert "XNAS calendar" in stale["message"]
    assert body["as_of"] == "2013-03-01T00:00:00"  # the upper median of two last candles

    r = c.post("/v1/forecast", json={**req, "exclude_stale": True})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == ["SPX"] and _warnings(body) == {"SPX": []}
    (err,) = body["errors"]
    assert err["symbol"] == "GOOG" and err["code"] == "stale"
    assert "last candle 2013-03-01 00:00:00: 10 sessions missed" in err["message"]


def test_a_symbol_far_behind_a_current_portfolio_is_stale_without_an_as_of(live_service):
    current = ["SYN0000", "SYN0001", "SYN0002"]
    r = live_service.client.post("/v1/forecast", json={"symbols": [*current, "GOOG"], **SMALL})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert _warnings(body) == {**{s: [] for s in current}, "GOOG": ["stale"]}
    message = [f for f in body["forecasts"] if f["symbol"] == "GOOG"][0]["warnings"][0]["message"]
    assert message.startswith("last candle 2013-03-01 00:00:00: ")
    assert "portfolio's as-of 2024-08-30 15:00:00" in message
    assert body["as_of"] == "2024-08-30T15:00:00"  # where most of the portfolio's candles end


def test_history_cut_only_for_the_callers_own_lookback(live_service):
    c = live_service.client
    r = c.post("/v1/forecast", json={"symbols": ["SPX"], **SMALL})  # 5,000 candles, default window
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert body["lookback"]["source"] == "default" and _warnings(body) == {"SPX": []}
    # GOOG holds 94 candles up to 2004-12-31: a lookback of 200 asked is cut
    r = c.post("/v1/forecast", json={"symbols": ["GOOG"], "lookback": 200,
                                     "as_of": "2004-12-31", **SMALL})
    assert r.status_code == 200, r.text[:300]
    (f,) = r.json()["forecasts"]
    (cut,) = [w for w in f["warnings"] if w["code"] == "history_cut"]
    held = f["history_length"]
    assert held < 200 and f"history of {held} candles, shorter than the lookback 200 asked" in (
        cut["message"]
    )


@pytest.mark.parametrize("year", ["0001", "0321", "9999"])
def test_a_date_outside_the_stores_years_is_a_422_on_every_route(live_service, year):
    c = live_service.client
    when = f"{year}-10-22T16:00:01Z"
    answers = {
        "candles": c.get("/v1/candles", params={"symbol": "SYN0003", "as_of": when}),
        "accuracy": c.get("/v1/accuracy", params={"since": when}),
        "forecast": c.post("/v1/forecast", json={"symbols": ["SYN0003"], "as_of": when, **SMALL}),
    }
    for route, r in answers.items():
        assert r.status_code == 422, (route, r.status_code, r.text[:300])
        assert "year must be 1678 to 2261" in r.text, (route, r.text[:300])
    schema = c.get("/openapi.json").json()["paths"]
    assert "422" in schema["/v1/candles"]["get"]["responses"]
    assert "422" in schema["/v1/accuracy"]["get"]["responses"]
    assert "422" in schema["/v1/forecast"]["post"]["responses"]
