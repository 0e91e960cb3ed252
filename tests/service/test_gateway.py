import asyncio

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from service_fakes import FakePredictor, FakeStore, fake_future, fake_info

from service.gateway import (
    FutureTimestamps,
    Gateway,
    Overloaded,
    ReplicaGone,
    RequestInvalid,
    outcome_to_arrow,
    outcome_to_json,
)
from service.metrics import Metrics
from service.schemas import ForecastRequest
from service.settings import Settings
from service.shards import BatchRunner


class FakeReplicas:
    """submit() runs the shard through a real BatchRunner + FakePredictor; can die or stall."""

    def __init__(self, die_first: int = 0, delay: float = 0.0):
        self.runner = BatchRunner(FakePredictor(), "fake-replica", "cpu")
        self.die_first = die_first
        self.delay = delay
        self.calls = 0

    async def submit(self, shard):
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.calls <= self.die_first:
            raise ReplicaGone("ActorDiedError: killed")
        results, report = self.runner.run([shard])
        results[0].reports = [report]
        return results[0]

    async def describe(self):
        return fake_info()


def _gateway(replicas=None, **settings):
    replicas = replicas or FakeReplicas()
    s = Settings(**{"max_context": 64, "shards_per_replica": 2, **settings})
    m = Metrics()
    gw = Gateway(s, FakeStore(), replicas.submit, replicas.describe, m, num_replicas=2,
                 fit_factory=lambda info, h, sc: (lambda L: 3), future=FutureTimestamps(fake_future))
    return gw, m, replicas


def _sample(m: Metrics, name, labels=None):
    v = m.registry.get_sample_value(name, labels or {})
    return 0.0 if v is None else v


def test_forecast_in_request_order_with_unknown_symbols():
    gw, m, _ = _gateway()
    req = ForecastRequest(symbols=["S005", "NOPE", "S001", "S012", "ALSO_NOT"], horizon=4)
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["S005", "S001", "S012"]
    assert [float(a[0, 3]) for a in out.mean] == [105.0, 101.0, 112.0]  # close of the right symbol
    assert [e["symbol"] for e in out.errors] == ["NOPE", "ALSO_NOT"]
    assert {e["code"] for e in out.errors} == {"unknown_symbol"}
    assert out.timing["lookback"] == 60  # max_context - horizon by default
    assert len(out.timestamps[0]) == 4
    assert _sample(m, "kronos_series_forecast_total") == 3
    assert _sample(m, "kronos_errors_total", {"code": "unknown_symbol"}) == 2
    assert _sample(m, "kronos_batch_size_count", {"replica": "fake-replica"}) == out.timing["shards"]


def test_shards_sized_by_memory_model():
    gw, m, reps = _gateway()
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=2)))
    assert out.timing["shards"] == 7  # fit() = 3 series per shard
    assert reps.calls == 7 and len(out.symbols) == 20


def test_replica_death_is_retried():
    gw, m, reps = _gateway(FakeReplicas(die_first=2))
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2)))
    assert out.symbols == ["S001", "S002"] and out.errors == []
    assert out.timing["shard_retries"] == 2
    assert _sample(m, "kronos_shard_retries_total") == 2


def test_retries_bounded_then_per_symbol_error():
    gw, m, reps = _gateway(FakeReplicas(die_first=100), shard_retries=1)
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)))
    assert out.symbols == [] and out.errors[0]["code"] == "replica_unavailable"


def test_inflight_bound_rejects_with_overloaded():
    gw, m, reps = _gateway(FakeReplicas(delay=0.2), max_inflight_requests=2)

    async def main():
        req = ForecastRequest(symbols=["S001"], horizon=2)
        return await asyncio.gather(*(gw.forecast(req) for _ in range(5)), return_exceptions=True)

    res = asyncio.run(main())
    rejected = [r for r in res if isinstance(r, Overloaded)]
    assert len(rejected) == 3 and all(r.retry_after_s >= 1 for r in rejected)
    assert sum(1 for r in res if not isinstance(r, Exception)) == 2
    assert _sample(m, "kronos_queue_depth", {"stage": "requests"}) == 0
    # serves again afterwards
    assert asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2))).symbols == ["S001"]


def test_deployment_symbol_limit_names_field():
    gw, _, _ = _gateway(max_symbols=2)
    with pytest.raises(RequestInvalid) as ei:
        asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002", "S003"], horizon=2)))
    assert ei.value.field == "symbols"


def test_inline_series_and_json_arrow_encoders():
    gw, _, _ = _gateway()
    ts = [f"2024-01-01T{h:02d}:00:00" for h in range(6)]
    req = ForecastRequest(
        series=[{"symbol": "MINE", "timestamps": ts, "open": [1] * 6, "high": [2] * 6, "low": [0.5] * 6,
                 "close": [1, 1, 1, 1, 1, 7], "volume": [10] * 6}],
        horizon=3, quantiles=[0.1, 0.9],
    )
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["MINE"]
    assert float(out.mean[0][0, 3]) == 7.0
    assert float(out.mean[0][0, 5]) > 0  # amount filled from volume x mean price
    js = outcome_to_json(out)
    f = js["forecasts"][0]
    assert f["timestamps"] == ["2024-01-01T06:00:00", "2024-01-01T07:00:00", "2024-01-01T08:00:00"]
    assert set(f["quantiles"]) == {"0.1", "0.9"}
    table = pa.ipc.open_stream(outcome_to_arrow(out)).read_all()
    assert table.num_rows == 3
    assert table.column("step").to_pylist() == [1, 2, 3]
    assert "close_q0.9" in table.column_names
    np.testing.assert_allclose(table.column("close").to_numpy(), out.mean[0][:, 3])
    assert table.schema.metadata[b"kronos.errors"] == b"[]"


def test_future_timestamp_cache_calls_once_per_calendar():
    calls = []

    def fn(h, n):
        calls.append(n)
        return fake_future(h, n)

    ft = FutureTimestamps(fn)
    hist = np.array(["2024-01-01T00", "2024-01-01T01"], dtype="datetime64[ns]")
    a = ft(hist, 3)
    b = ft(hist.copy(), 3)
    assert calls == [3] and (a == b).all()


class CountingReplicas(FakeReplicas):
    """Records how many shards of a request are in flight at once."""

    def __init__(self):
        super().__init__(delay=0.01)
        self.now = 0
        self.peak = 0

    async def submit(self, shard):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super().submit(shard)
        finally:
            self.now -= 1


@pytest.mark.parametrize("per_replica", [1, 2])
def test_shards_are_pulled_a_few_at_a_time(per_replica):
    """A request keeps at most replicas x shards_in_flight_per_replica shards in flight, so the
    next shard goes to whichever replica frees up first; all still come back in request order."""
    reps = CountingReplicas()
    gw, _, _ = _gateway(reps, shards_in_flight_per_replica=per_replica)
    symbols = [f"S{i:03d}" for i in range(20)]  # all the fake store holds
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)))
    assert out.timing["shards"] >= 5 and reps.calls == out.timing["shards"]
    assert reps.peak == 2 * per_replica  # num_replicas=2 in _gateway
    assert out.symbols == symbols


def test_future_timestamps_use_the_symbols_session_clock():
    """A symbol whose metadata names a session time zone (spot FX: New York) gets its future
    stamps on that clock; others get the plain call. Distinct sessions are cached apart."""
    calls = []

    def fn(history, horizon, **kw):
        calls.append(kw)
        return history[-1] + pd.to_timedelta(np.arange(1, horizon + 1), "h")

    future = FutureTimestamps(fn)
    hist = pd.date_range("2018-01-02", periods=48, freq="h").to_numpy()
    future(hist, 3)
    future(hist, 3, ("UTC", "America/New_York"))
    future(hist, 3, ("UTC", "America/New_York"))  # cached
    assert calls == [{}, {"timezone": "UTC", "session_timezone": "America/New_York"}]
