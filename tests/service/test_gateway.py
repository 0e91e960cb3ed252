import asyncio

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pytest
from response_checks import assert_arrow_equals_json
from service_fakes import FakeReplicas, FakeStore, fake_future

from kronos_core.engine.memory import estimate_inference_bytes
from service.gateway import (
    FutureTimestamps,
    Gateway,
    Outcome,
    Overloaded,
    RequestInvalid,
    memory_model_fit,
    outcome_to_arrow,
    outcome_to_json,
    quantile_label,
    summary_columns,
)
from service.metrics import Metrics
from service.schemas import ForecastRequest
from service.settings import Settings
from service.shards import ReplicaInfo


def _gateway(replicas=None, **settings):
    replicas = replicas or FakeReplicas()
    s = Settings(**{"max_context": 64, "shards_per_replica": 2, **settings})
    m = Metrics()
    gw = Gateway(s, FakeStore(), replicas, m, num_replicas=2,
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

    async def forecast_shard(self, shard):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super().forecast_shard(shard)
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


def _outcome(n_symbols: int, levels: tuple[float, ...], horizon: int = 3, seed: int = 0) -> Outcome:
    """An Outcome with a distinct random value in every cell, so a swapped column shows."""
    rng = np.random.default_rng(seed)
    syms = [f"SYM{i}" for i in range(n_symbols)]
    start = pd.Timestamp("2024-05-01 09:30")
    return Outcome(
        model={"name": "fake", "sha256": "ab" * 32},
        symbols=syms,
        timestamps=[pd.date_range(start + pd.Timedelta(days=i), periods=horizon, freq="h").to_numpy()
                    for i in range(n_symbols)],
        mean=[rng.normal(100, 5, (horizon, 6)).astype(np.float32) for _ in syms],
        quantile_levels=levels,
        quantiles=[rng.normal(100, 5, (len(levels), horizon, 6)).astype(np.float32) if levels else None
                   for _ in syms],
        paths=[None] * n_symbols,
        errors=[{"symbol": "GONE", "code": "unknown_symbol", "message": "GONE is not in the store"}],
        timing={"total_ms": 1.5, "series": float(n_symbols)},
        history_length=[10 + i for i in range(n_symbols)],
        last_timestamp=[(start + pd.Timedelta(days=i, hours=-1)).to_datetime64() for i in range(n_symbols)],
        warnings=[[] for _ in syms],
    )


def _wire_json(out: Outcome) -> dict:
    """outcome_to_json as the client sees it: through orjson, like service.app._json."""
    return orjson.loads(orjson.dumps(outcome_to_json(out), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))


@pytest.mark.parametrize("levels", [(), (0.1, 0.5, 0.9), (0.1234567, 0.1234568)])
def test_arrow_equals_json_every_column_symbol_and_level(levels):
    out = _outcome(4, levels)
    js = _wire_json(out)
    table = assert_arrow_equals_json(outcome_to_arrow(out), js, levels, compare_timing=True)
    assert table.num_rows == 4 * 3
    assert len(table.column_names) == 3 + 6 * (1 + len(levels))


def test_arrow_quantile_columns_stay_distinct_for_close_levels():
    """0.1234567 and 0.1234568 are two levels: two JSON keys and two Arrow columns, each with its own values."""
    out = _outcome(2, (0.1234567, 0.1234568))
    js = _wire_json(out)
    assert list(js["forecasts"][0]["quantiles"]) == ["0.1234567", "0.1234568"]
    table = pa.ipc.open_stream(outcome_to_arrow(out)).read_all()
    a, b = table.column("close_q0.1234567").to_numpy(), table.column("close_q0.1234568").to_numpy()
    np.testing.assert_array_equal(a, np.concatenate([q[0, :, 3] for q in out.quantiles]))
    np.testing.assert_array_equal(b, np.concatenate([q[1, :, 3] for q in out.quantiles]))
    assert quantile_label(0.1) == "0.1" and quantile_label(1 / 3) == repr(1 / 3)


def _with_summaries(out: Outcome, seed: int = 1) -> Outcome:
    """Distinct random risk summaries per symbol (the second symbol has none: null columns)."""
    rng = np.random.default_rng(seed)
    keys = ("expected_return", "p_up", "volatility", "horizon_volatility", "var_95", "es_95", "realized_volatility")
    out.summary = True
    out.summaries = [None if i == 1 else {**{k: float(rng.normal()) for k in keys}, "vol_alert": bool(i % 2)}
                     for i in range(len(out.symbols))]
    return out


@pytest.mark.parametrize("n_symbols", [0, 3])
def test_arrow_summary_columns_equal_json(n_symbols):
    out = _with_summaries(_outcome(n_symbols, (0.1, 0.9)))
    js = _wire_json(out)
    assert [("summary" in f) for f in js["forecasts"]] == [i != 1 for i in range(n_symbols)]
    table = assert_arrow_equals_json(outcome_to_arrow(out), js, (0.1, 0.9), compare_timing=True, summary=True)
    assert table.column_names[-8:] == [name for name, _ in summary_columns()]
    if n_symbols:
        rows = table.column("summary_var_95").to_pylist()
        assert rows[:3] == [out.summaries[0]["var_95"]] * 3 and rows[3:6] == [None] * 3
        assert table.column("summary_vol_alert").to_pylist()[6:] == [False] * 3


def test_arrow_has_no_summary_columns_unless_asked():
    out = _outcome(2, ())
    assert not any(c.startswith("summary_") for c in pa.ipc.open_stream(outcome_to_arrow(out)).read_all().column_names)


def test_arrow_equals_json_when_no_symbol_succeeded():
    out = _outcome(0, (0.25, 0.75))
    js = _wire_json(out)
    assert js["forecasts"] == [] and js["errors"][0]["symbol"] == "GONE"
    table = assert_arrow_equals_json(outcome_to_arrow(out), js, (0.25, 0.75), compare_timing=True)
    assert table.num_rows == 0 and "close_q0.75" in table.column_names


class BlockingReplicas(FakeReplicas):
    """forecast_shard() blocks until released (a slow replica); records which shards started, finished
    and were cancelled. ``fail_index``: that shard raises Overloaded (a full replica queue)."""

    def __init__(self, fail_index: int | None = None):
        super().__init__()
        self.fail_index = fail_index
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.release = asyncio.Event()

    async def forecast_shard(self, shard):
        self.started.append(shard.index)
        try:
            if shard.index == self.fail_index:
                await asyncio.sleep(0.01)
                raise Overloaded("replicas' queues are full", 1)
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(shard.index)
            raise
        self.finished.append(shard.index)
        return await super().forecast_shard(shard)


async def _until(cond, what: str, timeout: float = 30.0) -> None:
    """Polls ``cond()`` on the event loop until true (generous deadline: this is not a timing test)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_cancelled_request_cancels_its_in_flight_shards_and_sends_no_more():
    """The client went away (the ingress task is cancelled): every shard call in flight is
    cancelled, none of the waiting shards is ever sent, and the gauges return to zero."""
    reps = BlockingReplicas()
    gw, m, _ = _gateway(reps)  # 2 replicas x 2 shards in flight
    symbols = [f"S{i:03d}" for i in range(20)]  # 7 shards of <= 3 series

    async def main():
        task = asyncio.ensure_future(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)))
        await _until(lambda: len(reps.started) == 4, "4 shards in flight")
        assert _sample(m, "kronos_queue_depth", {"stage": "shards"}) == 4
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        reps.release.set()  # a replica that would now answer must find nobody waiting
        for _ in range(20):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert sorted(reps.cancelled) == sorted(reps.started) == [0, 1, 2, 3]
    assert reps.finished == [] and len(reps.started) == 4  # shards 4..6 were never sent
    assert _sample(m, "kronos_queue_depth", {"stage": "shards"}) == 0
    assert _sample(m, "kronos_queue_depth", {"stage": "requests"}) == 0
    assert gw._inflight == 0


def test_a_failing_shard_cancels_the_other_shards():
    """One shard is refused (Overloaded): the request answers 503 at once, and the shards
    still running for it are cancelled instead of holding replicas for a dead request."""
    reps = BlockingReplicas(fail_index=1)
    gw, m, _ = _gateway(reps)
    symbols = [f"S{i:03d}" for i in range(20)]

    async def main():
        with pytest.raises(Overloaded):
            await asyncio.wait_for(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)), timeout=10)
        # checked before asyncio.run's own clean-up could cancel leftovers
        return list(reps.started), list(reps.cancelled), gw._shards_inflight

    started, cancelled, shards_inflight = asyncio.run(main())
    assert 1 in started and sorted(cancelled) == sorted(i for i in started if i != 1)
    assert len(cancelled) >= 3 and reps.finished == []
    assert shards_inflight == 0 and gw._inflight == 0


def _tiny_info(tiny, budget: int, max_context: int = 64) -> ReplicaInfo:
    return ReplicaInfo("fake-replica", "cpu", budget, 1 << 30, max_context, tiny[0].config, tiny[1].config,
                       {"name": "fake", "bundled": True})


@pytest.mark.parametrize("lookback, horizon, samples, context", [(62, 2, 1, 64), (300, 24, 4, 512), (300, 64, 2, 128), (700, 16, 2, 256)])
def test_memory_model_fit_inverts_the_engine_estimate(tiny, lookback, horizon, samples, context):
    """The real ``memory_model_fit``: with a budget of exactly k series' estimate (at the
    replica's own max_context) it fits k."""
    m, t = tiny[0].config, tiny[1].config
    for k in (1, 7):
        budget = estimate_inference_bytes(m, t, k, lookback, horizon, samples, max_context=context)
        fit = memory_model_fit(_tiny_info(tiny, budget, max_context=context), horizon, samples)
        assert fit(lookback) == k
        assert estimate_inference_bytes(m, t, k + 1, lookback, horizon, samples, max_context=context) > budget
        assert fit(lookback + 100) <= k  # longer windows fit no more
    if (lookback, context) == (300, 128):  # precondition: here the replica's context changes the answer
        assert estimate_inference_bytes(m, t, 7, lookback, horizon, samples, max_context=512) > budget


def test_gateway_sizes_shards_with_the_real_memory_model(tiny):
    """No fit_factory given: the gateway plans shards with ``memory_model_fit`` from the
    replica's budget; a budget of 3 series' estimate gives shards of at most 3 series."""
    horizon = 2
    lookback = 64 - horizon  # the default lookback: max_context - horizon
    budget = estimate_inference_bytes(tiny[0].config, tiny[1].config, 3, lookback, horizon, 1, max_context=64)
    sizes = []

    class Sizing(FakeReplicas):
        async def forecast_shard(self, shard):
            sizes.append(shard.size)
            return await super().forecast_shard(shard)

    reps = Sizing(info=_tiny_info(tiny, budget))
    gw = Gateway(Settings(max_context=64, shards_per_replica=1), FakeStore(), reps, Metrics(),
                 num_replicas=1, future=FutureTimestamps(fake_future))
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=[f"S{i:03d}" for i in range(20)], horizon=horizon)))
    assert len(out.symbols) == 20 and out.timing["lookback"] == lookback
    assert sizes == [3] * 6 + [2] and out.timing["shards"] == 7


def test_each_forecast_says_what_history_it_used():
    """history_length / last_timestamp per series (not the lookback cap), and a short
    history is a warning, not a silent forecast."""
    gw, _, _ = _gateway(min_history_warning=32)
    ts = [f"2024-01-01T{h:02d}:00:00" for h in range(6)]
    req = ForecastRequest(
        series=[{"symbol": "MINE", "timestamps": ts, "open": [1] * 6, "high": [2] * 6, "low": [0.5] * 6,
                 "close": [1] * 6}],
        horizon=2,
    )
    out = asyncio.run(gw.forecast(req))
    assert out.timing["lookback"] == 62 and out.history_length == [6]
    f = outcome_to_json(out)["forecasts"][0]
    assert f["history_length"] == 6 and f["last_timestamp"] == "2024-01-01T05:00:00"
    assert [w["code"] for w in f["warnings"]] == ["short_history"] and "6 candles" in f["warnings"][0]["message"]
    inputs = pa.ipc.open_stream(outcome_to_arrow(out)).read_all().schema.metadata[b"kronos.inputs"]
    assert b'"history_length":6' in inputs and b"short_history" in inputs
    # a long enough store series carries no warning
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2, lookback=40)))
    assert out.history_length == [40] and out.warnings == [[]]


def test_as_of_past_the_end_of_the_data_is_a_warning():
    gw, _, _ = _gateway()
    store = gw.store  # hourly 2024-01-01 00:00 .. 300 candles
    last = store.idx[-1]
    inside = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2, as_of=store.idx[100])))
    assert inside.warnings == [[]] and inside.last_timestamp[0] == store.idx[100].to_datetime64()
    within_a_candle = asyncio.run(gw.forecast(
        ForecastRequest(symbols=["S001"], horizon=2, as_of=last + pd.Timedelta("30min"))))
    assert within_a_candle.warnings == [[]]
    late = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2, as_of="2025-01-01T00:00")))
    assert [[w["code"] for w in ws] for ws in late.warnings] == [["as_of_after_data"]] * 2
    assert str(last) in late.warnings[0][0]["message"]
    assert late.last_timestamp[0] == last.to_datetime64()


def test_a_failed_shard_reports_the_replicas_code_not_its_wording():
    """The code comes from ShardResult.error_code: a forecast failure whose message happens to
    start like a retry failure stays forecast_failed."""

    class Failing(FakeReplicas):
        async def forecast_shard(self, shard):
            from kronos_core.errors import ErrorCode
            from service.shards import ShardResult

            return ShardResult(shard.request_id, shard.index, "r", None, None, None,
                               error="replica unavailable (a message, not a code)",
                               error_code=ErrorCode.FORECAST_FAILED)

    gw, m, _ = _gateway(Failing())
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)))
    assert [e["code"] for e in out.errors] == ["forecast_failed"]
    assert _sample(m, "kronos_errors_total", {"code": "forecast_failed"}) == 1


def test_exchange_reaches_the_future_timestamps_from_the_request_or_the_metadata():
    calls = []

    def fn(history, horizon, **kw):
        calls.append(kw.get("exchange"))
        return fake_future(history, horizon)

    class TaggedStore(FakeStore):
        def read_windows(self, symbols, lookback, as_of=None, frequency=None):
            batch = super().read_windows(symbols, lookback, as_of, frequency)
            for w in batch.windows:
                w.metadata = {"timezone": None, "exchange": "XNAS" if w.symbol == "S001" else None}
            return batch

    gw, _, _ = _gateway()
    gw.store, gw._future = TaggedStore(), FutureTimestamps(fn)
    asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2)))
    assert calls == ["XNAS", None]  # the store's metadata names S001's venue
    calls.clear()
    asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2, exchange="XNYS")))
    assert calls == ["XNYS"]  # the request's wins (one call: both symbols share the calendar)


def test_an_exchange_calendar_skips_the_holiday_and_an_unknown_one_is_a_422():
    pytest.importorskip("exchange_calendars")
    gw, _, _ = _gateway()
    gw._future = FutureTimestamps()  # the real future_timestamps
    days = pd.bdate_range("2024-05-01", "2024-07-03")
    rows = [[d.isoformat(), 1.0, 2.0, 0.5, 1.5, 10.0] for d in days]
    req = ForecastRequest(series=[{"symbol": "SPY", "candles": rows}], horizon=3, exchange="XNYS")
    out = asyncio.run(gw.forecast(req))
    assert [str(pd.Timestamp(t).date()) for t in out.timestamps[0]] == ["2024-07-05", "2024-07-08", "2024-07-09"]
    with pytest.raises(RequestInvalid) as ei:
        asyncio.run(gw.forecast(req.model_copy(update={"exchange": "NOPE"})))
    assert ei.value.field == "exchange"
    # a venue the library knows but cannot build here (Athens: Orthodox Easter on pandas 3) was a
    # 500 found by Schemathesis; now a 422 naming the field, and the schema does not offer it
    with pytest.raises(RequestInvalid, match="ASEX calendar cannot be built") as ei:
        asyncio.run(gw.forecast(req.model_copy(update={"exchange": "ASEX"})))
    assert ei.value.field == "exchange"
    enum = next(alt for alt in ForecastRequest.model_json_schema()["properties"]["exchange"]["anyOf"]
                if alt.get("type") == "string")["enum"]
    assert "XNYS" in enum and "ASEX" not in enum and "XTAE" not in enum


def test_session_clock_reaches_future_timestamps_through_the_real_store(tmp_path):
    """A real KlineStore: EURUSD (UTC stamps, New York sessions in its metadata) gets its
    future stamps on New York's clock, the same candles without that metadata do not. The week
    after 2017-11-03 reopens at 17:00 New York = 22:00 UTC (daylight saving ends Nov 5)."""
    from kronos_core.data.sample_store import REAL_DIR
    from kronos_core.data.store import KlineStore
    from kronos_core.data.timestamps import future_timestamps
    from kronos_core.data.validate import validate_candles

    frame, _, _ = validate_candles(pd.read_csv(REAL_DIR / "eurusd_hourly.csv"), source="eurusd_hourly.csv")
    store = KlineStore(tmp_path)
    store.write("EURUSD", frame, frequency="1h", timezone="UTC", extra_metadata={"session_timezone": "America/New_York"},
                fsync=False)
    store.write("EURUSD.UTC", frame, frequency="1h", timezone="UTC", fsync=False)
    reps = FakeReplicas()
    gw = Gateway(Settings(max_context=512), store, reps, Metrics(), num_replicas=1,
                 fit_factory=lambda info, h, sc: (lambda L: 8))
    as_of, lookback, horizon = pd.Timestamp("2017-11-03 12:00"), 200, 24
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["EURUSD", "EURUSD.UTC"], as_of=as_of.isoformat(),
                                                  lookback=lookback, horizon=horizon)))
    assert out.symbols == ["EURUSD", "EURUSD.UTC"] and out.errors == []
    hist = pd.DatetimeIndex(store.read_windows(["EURUSD"], lookback, as_of=as_of).windows[0].timestamps)
    ny = pd.DatetimeIndex(future_timestamps(hist, horizon, timezone="UTC", session_timezone="America/New_York"))
    plain = pd.DatetimeIndex(future_timestamps(hist, horizon))
    ny = ny.tz_convert("UTC").tz_localize(None) if ny.tz is not None else ny
    plain = plain.tz_convert("UTC").tz_localize(None) if plain.tz is not None else plain
    assert list(ny) != list(plain)  # precondition: the clock matters here
    assert list(pd.DatetimeIndex(out.timestamps[0])) == list(ny)
    assert list(pd.DatetimeIndex(out.timestamps[1])) == list(plain)
    assert pd.Timestamp("2017-11-05 22:00") in ny and pd.Timestamp("2017-11-05 21:00") not in ny
