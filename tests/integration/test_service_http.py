"""The forecasting service over real HTTP: a real Ray Serve app with two CPU replicas,
the bundled (random-weight) model and the sample store. Nothing is faked here."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration

SMALL = {"lookback": 48, "horizon": 4}  # keeps 1,000-series requests quick on 2 cores


def _closes(resp: dict) -> np.ndarray:
    return np.array([f["mean"]["close"] for f in resp["forecasts"]], dtype=np.float64)


def test_health_ready_models_and_symbol_pages(live_service):
    c = live_service.client
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["replicas_ready"] == 2
    models = c.get("/v1/models").json()["models"]
    assert models[0]["bundled"] is True and models[0]["random_weights"] is True
    assert "RANDOM" in models[0]["note"]
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
        _, hist_ts = batch.series(i)
        ts = pd.DatetimeIndex(f["timestamps"])
        assert len(ts) == SMALL["horizon"] and ts[0] > hist_ts[-1] and ts.is_monotonic_increasing
        for col in ("open", "high", "low", "close", "volume", "amount"):
            assert len(f["mean"][col]) == SMALL["horizon"] and np.isfinite(f["mean"][col]).all()


def test_mixed_request_unknown_and_invalid_symbols(live_service):
    good = live_service.store.symbols()[:3]
    req = [good[0], "NO_SUCH_SYMBOL", good[1], "../etc/passwd", good[2]]
    r = live_service.client.post("/forecast", json={"symbols": req, **SMALL})  # the legacy route name
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
    r = live_service.client.post("/v1/forecast", json={"series": [s, _inline(80, "OTHER")], "horizon": 6, "seed": 5})
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
        ({"series": [_inline(bad=("close", 7, None))], "horizon": 3}, "close[7]"),
        ({"series": [_inline(bad=("high", 2, "NaN"))], "horizon": 3}, "high[2]"),
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


def test_malformed_and_nan_literal_bodies(live_service):
    c = live_service.client
    r = c.post("/v1/forecast", content=b'{"symbols": ["A"], "horizon": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "json" in r.text.lower()
    raw = ('{"series": [{"symbol": "X", "timestamps": ["2024-01-01", "2024-01-02", "2024-01-03"],'
           ' "open": [1, 2, 3], "high": [1, 2, 3], "low": [1, 2, 3], "close": [1, NaN, 3]}], "horizon": 1}')
    r = c.post("/v1/forecast", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422 and "close[1]" in r.text


def test_arrow_stream_matches_json(live_service):
    symbols = live_service.store.symbols()[10:15] + ["NOPE"]
    req = {"symbols": symbols, **SMALL, "seed": 9, "quantiles": [0.1, 0.5, 0.9], "sample_count": 4}
    js = live_service.client.post("/v1/forecast", json=req).json()
    r = live_service.client.post("/v1/forecast", json=req, headers={"Accept": "application/vnd.apache.arrow.stream"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/vnd.apache.arrow.stream")
    table = pa.ipc.open_stream(r.content).read_all()
    h = SMALL["horizon"]
    assert table.num_rows == 5 * h
    assert table.column("symbol").to_pylist() == [s for s in symbols[:5] for _ in range(h)]
    assert table.column("step").to_pylist() == list(range(1, h + 1)) * 5
    assert {"close_q0.1", "close_q0.5", "close_q0.9", "amount_q0.9"} <= set(table.column_names)
    np.testing.assert_allclose(table.column("close").to_numpy().reshape(5, h), _closes(js), rtol=1e-6)
    np.testing.assert_allclose(
        table.column("high_q0.9").to_numpy().reshape(5, h),
        [f["quantiles"]["0.9"]["high"] for f in js["forecasts"]], rtol=1e-6,
    )
    ts = pd.DatetimeIndex(table.column("timestamp").to_pandas()[:h])
    assert list(ts) == list(pd.DatetimeIndex(js["forecasts"][0]["timestamps"]))
    import json

    errors = json.loads(table.schema.metadata[b"kronos.errors"])
    assert errors[0]["symbol"] == "NOPE" and errors[0]["code"] == "unknown_symbol"


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
    from service.gateway import FutureTimestamps

    symbols = live_service.store.symbols()[30:36]
    req = {"symbols": symbols, **SMALL, "sample_count": 2, "seed": 7}
    body = live_service.client.post("/v1/forecast", json=req).json()
    predictor = load_predictor(live_service.settings.predictor_config(device="cpu"))
    assert body["model"]["sha256"] == predictor.identity.sha256
    batch = live_service.store.read_windows(symbols, SMALL["lookback"])
    ft = FutureTimestamps()
    series, xts, yts = [], [], []
    for i in range(len(symbols)):
        v, ts = batch.series(i)
        series.append(np.asarray(v, np.float32))
        xts.append(ts)
        yts.append(ft(ts.to_numpy(), SMALL["horizon"]))
    res = predictor.forecast(series, xts, yts, SMALL["horizon"], sample_count=2, seed=7)
    np.testing.assert_allclose(_closes(body), res.mean[:, :, 3], rtol=1e-5, atol=1e-5)
    assert [list(pd.DatetimeIndex(f["timestamps"])) for f in body["forecasts"]] == [list(pd.DatetimeIndex(y)) for y in yts]


def _predictor_replica_actors() -> list[tuple[str, str]]:
    """(namespace, name) of the live Predictor replica actors (named by Serve)."""
    import ray

    names = ray.util.list_named_actors(all_namespaces=True)
    return [(a["namespace"], a["name"]) for a in names
            if "REPLICA" in a["name"].upper() and "Predictor" in a["name"]]


def test_replica_killed_during_request_still_succeeds(live_service):
    import ray

    symbols = live_service.store.symbols()[:1000]
    req = {"symbols": symbols, "lookback": 256, "horizon": 16, "seed": 11}
    retries_before = live_service.metric("kronos_shard_retries_total")
    result: dict = {}

    def call():
        with httpx.Client(base_url=live_service.url, timeout=300) as c:
            result["r"] = c.post("/v1/forecast", json=req)

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 60
    while live_service.metric("kronos_queue_depth", {"stage": "shards"}) < 1:
        assert time.monotonic() < deadline and t.is_alive(), "the request never reached the replicas"
        time.sleep(0.05)
    time.sleep(0.5)  # the replicas are now running their batches
    victims = _predictor_replica_actors()
    assert len(victims) == 2
    namespace, name = victims[0]
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    t.join(timeout=300)
    r = result["r"]
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert body["errors"] == []
    assert [f["symbol"] for f in body["forecasts"]] == symbols
    assert body["timing"]["shard_retries"] >= 1  # the killed replica's shards ran elsewhere
    assert live_service.metric("kronos_shard_retries_total") >= retries_before + 1
    live_service.wait_ready(2, timeout=120)  # Serve replaces the replica


def test_overload_gives_503_with_retry_after_then_serves_again(live_service):
    live_service.wait_ready(2, timeout=120)
    symbols = live_service.store.symbols()[:200]
    req = {"symbols": symbols, "lookback": 128, "horizon": 8}
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


def test_client_disconnect_cancels_pending_shards(live_service):
    live_service.wait_ready(2, timeout=120)
    symbols = live_service.store.symbols()[:1000]
    # ~10 s of work on 2 cores; the client leaves after 1.5 s
    req = {"symbols": symbols, "lookback": 256, "horizon": 16}
    with httpx.Client(base_url=live_service.url, timeout=1.5) as c, pytest.raises(httpx.ReadTimeout):
        c.post("/v1/forecast", json=req)
    # the gateway dropped the request and its shard calls at once, not after the work would have finished
    deadline = time.monotonic() + 5
    while live_service.metric("kronos_queue_depth", {"stage": "shards"}) > 0:
        assert time.monotonic() < deadline, "shards still pending 5 s after the client left"
        time.sleep(0.1)
    assert live_service.metric("kronos_queue_depth", {"stage": "requests"}) == 0
    r = live_service.client.post("/v1/forecast", json={"symbols": symbols[:3], "lookback": 32, "horizon": 2})
    assert r.status_code == 200 and len(r.json()["forecasts"]) == 3
