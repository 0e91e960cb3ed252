"""The forecasting service over real HTTP: a real Ray Serve app with two CPU replicas,
the bundled default model (trained, docs/model-card.md) and the sample store. Nothing is faked
here."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from response_checks import assert_arrow_equals_json

pytestmark = pytest.mark.integration

# one path (not the model's default of 32): keeps 1,000-series requests quick on 2 cores
SMALL = {"lookback": 48, "horizon": 4, "sample_count": 1}
# Requests that must keep the replicas busy for a few seconds: the longest that fits the bundled
# model's 256-candle context (a longer one re-encodes the window at every step, ~8x the work).
LONG = {"lookback": 240, "horizon": 16, "sample_count": 1}


def _closes(resp: dict) -> np.ndarray:
    return np.array([f["mean"]["close"] for f in resp["forecasts"]], dtype=np.float64)


def test_health_ready_models_and_symbol_pages(live_service):
    c = live_service.client
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz")
    assert (
        ready.status_code == 200
        and ready.json()["ready"] is True
        and ready.json()["replicas_ready"] == 2
    )
    models = c.get("/v1/models").json()["models"]
    assert models[0]["bundled"] is True and models[0]["random_weights"] is False
    assert models[0]["name"] == "kronos-default" and "note" not in models[0]
    all_symbols = live_service.store.symbols()
    page = c.get("/v1/symbols", params={"limit": 7, "offset": 3}).json()
    assert page["total"] == len(all_symbols) and page["symbols"] == all_symbols[3:10]
    assert page["limit"] == 7 and page["offset"] == 3
    assert c.get("/v1/symbols", params={"limit": 0}).status_code == 422
    assert c.get("/docs").status_code == 200
    assert "/v1/forecast" in c.get("/openapi.json").json()["paths"]


def test_thousand_symbols_in_request_order(live_service):
    symbols = live_service.store.symbols()[:1000]
    assert len(symbols) == 1000, "the sample store should hold at least 1,000 symbols"
    rev = symbols[::-1]  # not the store's order: the answer must follow the request
    r = live_service.client.post("/v1/forecast", json={"symbols": rev, **SMALL, "seed": 1})
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert body["errors"] == []
    assert [f["symbol"] for f in body["forecasts"]] == rev
    assert body["timing"]["series"] == 1000 and body["timing"]["shards"] >= 2
    batch = live_service.store.read_windows(rev[:3], SMALL["lookback"])
    for i, f in enumerate(body["forecasts"][:3]):
        hist_ts = pd.DatetimeIndex(batch.windows[i].timestamps)
        ts = pd.DatetimeIndex(f["timestamps"])
        assert len(ts) == SMALL["horizon"] and ts[0] > hist_ts[-1] and ts.is_monotonic_increasing
        for col in ("open", "high", "low", "close", "volume", "amount"):
            assert len(f["mean"][col]) == SMALL["horizon"] and np.isfinite(f["mean"][col]).all()


def test_mixed_request_unknown_and_invalid_symbols(live_service):
    good = live_service.store.symbols()[:3]
    req = [good[0], "NO_SUCH_SYMBOL", good[1], "../etc/passwd", good[2]]
    # the legacy route name
    r = live_service.client.post("/forecast", json={"symbols": req, **SMALL})
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == good
    errors = {e["symbol"]: e for e in body["errors"]}
    assert errors["NO_SUCH_SYMBOL"]["code"] == "unknown_symbol"
    assert errors["../etc/passwd"]["code"] == "invalid_symbol"
    assert all(e["message"] for e in body["errors"])


def _inline(n=120, symbol="MINE", bad=None):
    idx = pd.date_range("2024-03-01 09:30", periods=n, freq="30min")
    rng = np.random.default_rng(3)
    close = 50 + np.cumsum(rng.normal(0, 0.3, n))
    s = {"symbol": symbol, "timestamps": [t.isoformat() for t in idx],
         "open": close.tolist(), "high": (close + 0.5).tolist(), "low": (close - 0.5).tolist(),
         "close": close.tolist(), "volume": rng.uniform(100, 200, n).tolist()}
    if bad:
        s[bad[0]][bad[1]] = bad[2]
    return s


def test_inline_series_request(live_service):
    s = _inline()
    r = live_service.client.post(
        "/v1/forecast", json={"series": [s, _inline(80, "OTHER")], "horizon": 6, "seed": 5}
    )
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == ["MINE", "OTHER"] and body["errors"] == []
    ts = pd.DatetimeIndex(body["forecasts"][0]["timestamps"])
    assert len(ts) == 6 and ts[0] > pd.Timestamp(s["timestamps"][-1])
    # the model sees a normalised window: the forecast lives on the series' own scale
    assert 30 < np.mean(body["forecasts"][0]["mean"]["close"]) < 70


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"symbols": ["A"], "horizon": 0}, "horizon"),
        ({"symbols": ["A"], "horizon": 100_000}, "horizon"),
        ({"symbols": [f"S{i}" for i in range(10_001)], "horizon": 2}, "symbols"),
        ({"symbols": ["A"], "horizon": 2, "quantiles": [1.5]}, "quantiles"),
        ({"symbols": "A", "horizon": 2}, "symbols"),
    ],
)
def test_invalid_requests_are_4xx_naming_the_field(live_service, payload, field):
    r = live_service.client.post("/v1/forecast", json=payload)
    assert r.status_code == 422, r.text[:300]
    assert field in r.text


@pytest.mark.parametrize("payload, field", [
    ({"series": [_inline(bad=("close", 7, None))], "horizon": 3}, "close[7]"),
    ({"series": [_inline(bad=("high", 2, "NaN"))], "horizon": 3}, "high[2]"),
])
def test_a_request_whose_only_series_is_invalid_answers_it_in_errors(live_service, payload, field):
    # the same rule as beside a valid series (and as for store symbols): a 200, no forecasts
    r = live_service.client.post("/v1/forecast", json=payload)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["forecasts"] == [] and r.json()["errors"][0]["code"] == "invalid_series"
    assert field in r.json()["errors"][0]["message"]


def test_malformed_and_nan_literal_bodies(live_service):
    c = live_service.client
    r = c.post(
        "/v1/forecast", content=b'{"symbols": ["A"], "horizon": ',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and "json" in r.text.lower()
    raw = (
        '{"series": [{"symbol": "X", "timestamps": ["2024-01-01", "2024-01-02", "2024-01-03"],'
        ' "open": [1, 2, 3], "high": [1, 2, 3], "low": [1, 2, 3], "close": [1, NaN, 3]}], '
        '"horizon": 1}'
    )
    r = c.post("/v1/forecast", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["forecasts"] == [] and "close[1] is NaN" in r.text


def test_arrow_stream_matches_json(live_service):
    """Every column, symbol, quantile level and timestamp of the Arrow answer equals the JSON
    answer; a request where no symbol succeeds gives an empty table with the same columns."""
    symbols = live_service.store.symbols()[10:15] + ["NOPE"]
    levels = [0.1, 0.5, 0.9, 0.1234567, 0.1234568]
    req = {"symbols": symbols, **SMALL, "seed": 9, "quantiles": levels, "sample_count": 4}
    arrow_headers = {"Accept": "application/vnd.apache.arrow.stream"}
    js = live_service.client.post("/v1/forecast", json=req).json()
    r = live_service.client.post("/v1/forecast", json=req, headers=arrow_headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith(
        "application/vnd.apache.arrow.stream"
    )
    table = assert_arrow_equals_json(r.content, js, levels)
    assert (
        table.num_rows == 5 * SMALL["horizon"] and len({f["symbol"] for f in js["forecasts"]}) == 5
    )
    assert js["errors"][0]["symbol"] == "NOPE" and js["errors"][0]["code"] == "unknown_symbol"

    empty = {**req, "symbols": ["NOPE", "ALSO_NOPE"]}
    js = live_service.client.post("/v1/forecast", json=empty).json()
    r = live_service.client.post("/v1/forecast", json=empty, headers=arrow_headers)
    assert r.status_code == 200 and r.headers["X-Kronos-Errors"] == "2"
    table = assert_arrow_equals_json(r.content, js, levels)
    assert table.num_rows == 0 and [e["symbol"] for e in js["errors"]] == ["NOPE", "ALSO_NOPE"]

    # with risk summaries: summary_* columns, each symbol's JSON summary on each of its rows
    summed = {**req, "summary": True}
    js = live_service.client.post("/v1/forecast", json=summed).json()
    r = live_service.client.post("/v1/forecast", json=summed, headers=arrow_headers)
    table = assert_arrow_equals_json(r.content, js, levels, summary=True)
    assert sum("summary" in f for f in js["forecasts"]) == 5
    assert table.column("summary_p_up").null_count == 0
    r = live_service.client.post(
        "/v1/forecast", json={**empty, "summary": True}, headers=arrow_headers
    )
    assert "summary_var_95" in pa.ipc.open_stream(r.content).read_all().column_names


def test_quantiles_paths_and_seeds(live_service):
    symbols = live_service.store.symbols()[20:26]
    req = {"symbols": symbols, **SMALL, "sample_count": 8, "quantiles": [0.9, 0.1, 0.5], "seed": 42,
           "return_paths": True}
    a = live_service.client.post("/v1/forecast", json=req).json()
    b = live_service.client.post("/v1/forecast", json=req).json()
    c = live_service.client.post("/v1/forecast", json={**req, "seed": 43}).json()
    assert a["forecasts"] == b["forecasts"]  # same seed, same answer (exactly)
    assert not np.allclose(_closes(a), _closes(c))
    f = a["forecasts"][0]
    assert list(f["quantiles"]) == ["0.1", "0.5", "0.9"]
    q = {k: np.array(v["close"]) for k, v in f["quantiles"].items()}
    assert (q["0.1"] <= q["0.5"] + 1e-6).all() and (q["0.5"] <= q["0.9"] + 1e-6).all()
    assert len(f["paths"]) == 8
    paths = np.array([p["close"] for p in f["paths"]])  # (S, H)
    np.testing.assert_allclose(paths.mean(axis=0), f["mean"]["close"], rtol=1e-4)
    np.testing.assert_allclose(np.quantile(paths, 0.9, axis=0), q["0.9"], rtol=1e-4)
    # seeded sampling is batch-invariant: a symbol alone gets the same forecast as in the portfolio
    alone = live_service.client.post("/v1/forecast", json={**req, "symbols": symbols[2:3]}).json()
    assert alone["forecasts"][0] == a["forecasts"][2]


def test_repair_makes_forecast_candles_consistent(live_service):
    symbols = live_service.store.symbols()[30:50]
    req = {"symbols": symbols, **SMALL, "sample_count": 4, "seed": 5, "repair": True}
    resp = live_service.client.post("/v1/forecast", json=req)
    assert resp.status_code == 200 and len(resp.json()["forecasts"]) == len(symbols)
    for f in resp.json()["forecasts"]:
        m = {k: np.array(v) for k, v in f["mean"].items()}
        assert (m["high"] >= np.maximum(m["open"], m["close"]) - 1e-6).all()
        assert (m["low"] <= np.minimum(m["open"], m["close"]) + 1e-6).all()
        assert (m["volume"] >= 0).all() and (m["amount"] >= 0).all()
    plain = live_service.client.post("/v1/forecast", json={**req, "repair": False}).json()
    # repair leaves open and close alone
    np.testing.assert_allclose(_closes(plain), _closes(resp.json()), rtol=1e-5)


def test_service_equals_engine_called_directly(live_service):
    from kronos_core import load_predictor
    from kronos_core.base.options import ForecastOptions
    from service.gateway import FutureTimestamps

    symbols = live_service.store.symbols()[30:36]
    req = {"symbols": symbols, **SMALL, "sample_count": 2, "seed": 7}
    body = live_service.client.post("/v1/forecast", json=req).json()
    predictor = load_predictor(live_service.settings.predictor_config(device="cpu"))
    assert body["model"]["sha256"] == predictor.identity.sha256
    batch = live_service.store.read_windows(symbols, SMALL["lookback"])
    ft = FutureTimestamps()
    series, xts, yts = [], [], []
    for w in batch.windows:
        v, ts = w.values, pd.DatetimeIndex(w.timestamps)
        series.append(np.asarray(v, np.float32))
        xts.append(ts)
        # the gateway's future: sessions from the stored history when no calendar is named
        history = ts.to_numpy() if w.template_stamps is None else w.template_stamps
        yts.append(ft(history, SMALL["horizon"], None, w.metadata.get("exchange")))
    res = predictor.forecast(
        series, xts, yts, ForecastOptions(SMALL["horizon"], sample_count=2, seed=7)
    )
    np.testing.assert_allclose(_closes(body), res.mean[:, :, 3], rtol=1e-5, atol=1e-5)
    assert [list(pd.DatetimeIndex(f["timestamps"])) for f in body["forecasts"]] == [
        list(pd.DatetimeIndex(y)) for y in yts
    ]


def test_replica_killed_during_request_still_succeeds(live_service):
    import ray

    live_service.settle()
    # 400 series still make 16 shards (8 per replica, 2 in flight each), so the victim has work
    # queued behind the shard it dies with. Lookback + horizon stay within the bundled model's
    # 256-candle context (LONG): past it every step re-encodes the whole window, ~8x the work.
    symbols = live_service.store.symbols()[:400]
    req = {"symbols": symbols, **LONG, "seed": 11}
    retries_before = live_service.metric("kronos_shard_retries_total")
    result: dict = {}

    def call():
        with httpx.Client(base_url=live_service.url, timeout=600) as c:
            result["r"] = c.post("/v1/forecast", json=req)

    done_before = {
        i: live_service.metric("kronos_batch_shards_total", {"replica": i})
        for i in live_service.replica_ongoing()
    }
    t = threading.Thread(target=call)
    t.start()
    # Precondition, not a sleep: the replica to kill has already answered a shard of this request
    # and still holds more. Killing one that holds only shards it has not yet acknowledged lets
    # Ray Serve's router re-route them itself (no shard retry of ours to count), a race seen in CI.
    deadline = time.monotonic() + 180
    victim = None
    while victim is None:
        ongoing = live_service.replica_ongoing()
        answered = [
            i
            for i in ongoing
            if live_service.metric("kronos_batch_shards_total", {"replica": i})
            > done_before.get(i, 0.0)
        ]
        victim = next((i for i in answered if ongoing[i] >= 1), None)
        assert time.monotonic() < deadline and t.is_alive(), (
            f"no replica answered a shard and held another: {ongoing}"
        )
        if victim is None:
            time.sleep(0.02)
    namespace, name = next(a for a in live_service.replica_actors() if a[1].endswith("#" + victim))
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    t.join(timeout=600)
    r = result["r"]
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert body["errors"] == []
    assert [f["symbol"] for f in body["forecasts"]] == symbols
    assert body["timing"]["shard_retries"] >= 1  # the killed replica's shards ran elsewhere
    assert live_service.metric("kronos_shard_retries_total") >= retries_before + 1
    live_service.wait_ready(2, timeout=300)  # Serve replaces the replica


def test_overload_gives_503_with_retry_after_then_serves_again(live_service):
    live_service.settle()
    symbols = live_service.store.symbols()[:200]
    req = {"symbols": symbols, "lookback": 64, "horizon": 4}  # seconds per request once they queue
    n = 4 * live_service.settings.max_inflight_requests

    def call(_):
        with httpx.Client(base_url=live_service.url, timeout=300) as c:
            return c.post("/v1/forecast", json=req)

    with ThreadPoolExecutor(n) as pool:
        responses = list(pool.map(call, range(n)))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429, 503}, codes
    rejected = [r for r in responses if r.status_code in (429, 503)]
    assert rejected, f"no request was rejected: {codes}"
    assert all(int(r.headers["Retry-After"]) >= 1 for r in rejected)
    assert all(r.json()["code"] == "overloaded" for r in rejected)
    assert codes.count(200) >= 1
    assert all(len(r.json()["forecasts"]) == 200 for r in responses if r.status_code == 200)
    assert live_service.metric("kronos_errors_total", {"code": "overloaded"}) >= len(rejected)
    # and it serves again once the burst has drained
    r = live_service.client.post("/v1/forecast", json={**req, "symbols": symbols[:5]})
    assert r.status_code == 200 and len(r.json()["forecasts"]) == 5
    assert live_service.metric("kronos_queue_depth", {"stage": "requests"}) == 0


def _post_raw(url: str, body: dict) -> socket.socket:
    """A forecast request on a bare socket, so that the test decides when the client leaves."""
    u = urlparse(url)
    sock = socket.create_connection((u.hostname, u.port), timeout=60)
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/forecast HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def test_client_disconnect_stops_the_replicas_working_for_it(live_service):
    """The client leaves while its shards run: the gateway drops the request, and the replicas
    run only what was already in flight, not the rest of the request."""
    live_service.settle()
    settings = live_service.settings
    n = 1000
    symbols = live_service.store.symbols()[:n]
    series0 = live_service.metric("kronos_batch_size_sum")
    sock = _post_raw(live_service.url, {"symbols": symbols, **LONG})
    try:
        deadline = time.monotonic() + 180  # precondition: its shards are running on the replicas
        while not (sum(live_service.replica_ongoing().values()) >= 1
                   and live_service.metric("kronos_queue_depth", {"stage": "shards"}) >= 1):
            assert time.monotonic() < deadline, "the request never reached the replicas"
            time.sleep(0.02)
        done_before = live_service.metric("kronos_batch_size_sum") - series0
        assert done_before <= n / 4, (
            f"{done_before} of {n} series done before the client left: no work left to cancel"
        )
    finally:
        sock.close()
    deadline = time.monotonic() + 120
    while live_service.metric("kronos_queue_depth", {"stage": "requests"}) > 0:
        assert time.monotonic() < deadline, (
            "the gateway still runs the request 120 s after the client left"
        )
        time.sleep(0.1)
    flushed = sum(len(b["forecasts"]) for b in live_service.settle())  # replicas idle, reports in
    done_after = live_service.metric("kronos_batch_size_sum") - series0 - flushed - done_before
    # series per shard
    shard = max(math.ceil(n / (settings.num_replicas * settings.shards_per_replica)),
                math.ceil(settings.min_shard_tokens / LONG["lookback"]))
    in_flight = settings.num_replicas * settings.shards_in_flight_per_replica
    # racing: shards the gateway sends as in-flight ones finish, until Serve cancels its
    # coroutine. That wait is time, not shards: alone it is none (4 shards ran after the client
    # left, 2026-12-08), but under the suite's parallel load with the faster compiled attention
    # one run counted 7; a gateway that does not cancel runs all 16.
    racing = 4
    assert done_after <= (in_flight + racing) * shard, (
        f"replicas ran {done_after} series after the client left; at most the {in_flight} shards "
        f"in flight (+{racing} racing) of {shard} series may finish, not the remaining "
        f"{n - done_before}"
    )
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": symbols[:3], "lookback": 32, "horizon": 2}
    )
    assert r.status_code == 200 and len(r.json()["forecasts"]) == 3


def test_a_24_7_request_stamps_crypto_five_minutes_on_over_the_weekend(live_service):
    """Issue 44: ``"exchange": "24/7"`` was refused by the schema's pattern; a 5-minute crypto
    series ending Friday night is now stamped at the next 5 minutes, into Saturday."""
    from tests.data.crypto_helpers import crypto_frame

    frame = crypto_frame(start="2018-01-26 03:00", days=1)  # ends Saturday 2018-01-27 02:55
    frame = frame.iloc[-251:]
    s = {"symbol": "ADA-BTC", "timestamps": [t.isoformat() for t in frame["timestamps"]],
         **{c: frame[c].tolist() for c in ("open", "high", "low", "close", "volume")}}
    r = live_service.client.post("/v1/forecast", json={"series": [s], "horizon": 3,
                                                       "exchange": "24/7"})
    assert r.status_code == 200, r.text[:500]
    got = pd.DatetimeIndex(r.json()["forecasts"][0]["timestamps"])
    last = frame["timestamps"].iloc[-1]
    assert list(got) == [last + pd.Timedelta(minutes=5 * k) for k in (1, 2, 3)]


def test_fx_future_timestamps_follow_the_new_york_session(live_service):
    """EURUSD is stamped in UTC but trades on New York's clock (store metadata session_timezone):
    the week reopens Sunday 17:00 New York, which is 22:00 UTC once daylight saving has ended."""
    from kronos_core.data.timestamps import future_timestamps

    as_of, lookback, horizon = "2017-11-03T12:00:00", 400, 24  # the Friday before DST ends (Nov 5)
    r = live_service.client.post("/v1/forecast", json={"symbols": ["EURUSD"], "as_of": as_of,
                                                       "lookback": lookback, "horizon": horizon})
    assert r.status_code == 200, r.text[:300]
    got = pd.DatetimeIndex(r.json()["forecasts"][0]["timestamps"])
    batch = live_service.store.read_windows(["EURUSD"], lookback, as_of=pd.Timestamp(as_of))
    hist = pd.DatetimeIndex(batch.windows[0].timestamps)
    meta = batch.windows[0].metadata
    assert meta["session_timezone"] == "America/New_York"
    want = pd.DatetimeIndex(future_timestamps(hist, horizon, timezone=meta["timezone"],
                                              session_timezone=meta["session_timezone"]))
    want = want.tz_convert("UTC").tz_localize(None) if want.tz is not None else want
    plain = pd.DatetimeIndex(future_timestamps(hist, horizon))
    assert list(want) != list(plain)  # precondition: the session clock matters for this as_of
    assert list(got) == list(want)
    assert pd.Timestamp("2017-11-05 22:00") in got and pd.Timestamp("2017-11-05 21:00") not in got


def test_a_new_users_first_requests_are_answered_with_what_happened(live_service):
    """Issue 26 over HTTP: a horizon past the model's context is a 422 naming the limit (before
    any read); a gapped series of a known exchange is warned about, naming the figures; the
    model's default window is no history cut (issue 52); a lowercase symbol gets a "did you
    mean"; p_up comes with its number of paths."""
    c = live_service.client
    mc = c.get("/v1/models").json()["models"][0]["max_context"]
    r = c.post("/v1/forecast", json={"symbols": ["GOOG"], "horizon": mc + 1})
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["loc"][-1] == "horizon" and f"max_context {mc}" in r.text
    # and the served schema says so: a schema-valid horizon is one the model can forecast
    schema = c.get("/openapi.json").json()
    assert (
        schema["components"]["schemas"]["ForecastRequest"]["properties"]["horizon"]["maximum"] == mc
    )

    sessions = pd.bdate_range("2024-02-01", "2024-04-30")  # with XNYS holidays removed below
    from kronos_core.data.calendars import exchange_sessions

    cal = exchange_sessions("XNYS")
    days = pd.DatetimeIndex((cal.day * 24 * 3600 * 10**9).astype("datetime64[ns]"))
    sessions = sessions[sessions.isin(days)]
    kept = sessions.delete(range(10, 30))  # 20 sessions missing
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(kept))))
    gappy = {"symbol": "GAPPY", "candles": [[t.isoformat(), c_, c_ * 1.01, c_ * 0.99, c_, 1e6]
                                            for t, c_ in zip(kept, close)]}
    r = c.post("/v1/forecast", json={"series": [gappy], "horizon": 3, "exchange": "XNYS"})
    assert r.status_code == 200, r.text[:300]
    (warning,) = [
        w for w in r.json()["forecasts"][0]["warnings"] if w["code"] == "missing_sessions"
    ]
    assert warning["message"].startswith(f"20 of the {len(sessions)} XNYS sessions")

    horizon = 8  # the default lookback is then mc - 8 candles (GOOG holds more)
    r = c.post("/v1/forecast", json={"symbols": ["GOOG", "goog"], "horizon": horizon,
                                     "sample_count": 4, "summary": True, "seed": 1})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    (f,) = body["forecasts"]
    assert f["history_length"] == mc - horizon and body["lookback"]["source"] == "default"
    # the model's own window is no cut (issue 52): tests/integration/test_stale_http.py
    assert not [w for w in f["warnings"] if w["code"] == "history_cut"]
    assert f["summary"]["sample_paths"] == 4
    (err,) = body["errors"]
    assert err["code"] == "unknown_symbol" and "did you mean 'GOOG'?" in err["message"]
