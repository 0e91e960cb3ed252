"""Stage prepare (``service.gateway.prepare``, ``.inline``, ``.future``): inline candles and
store windows become arrays with their future timestamps, history length and warnings."""

import asyncio
import dataclasses

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from service_fakes import FakeReplicas, FakeStore, fake_future, fake_gateway

from service.common.errors import RequestInvalid
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.encode import answer_to_arrow, answer_to_json
from service.gateway.future import FutureTimestamps


def test_inline_series_and_json_arrow_encoders():
    gw, _, _ = fake_gateway()
    ts = [f"2024-01-01T{h:02d}:00:00" for h in range(6)]
    req = ForecastRequest(
        series=[
            {
                "symbol": "MINE", "timestamps": ts, "open": [1] * 6, "high": [2] * 6,
                "low": [0.5] * 6, "close": [1, 1, 1, 1, 1, 7], "volume": [10] * 6,
            }
        ],
        horizon=3, quantiles=[0.1, 0.9],
    )
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["MINE"]
    assert float(out.mean[0][0, 3]) == 7.0
    assert float(out.mean[0][0, 5]) > 0  # amount filled from volume x mean price
    js = answer_to_json(out)
    f = js["forecasts"][0]
    assert f["timestamps"] == ["2024-01-01T06:00:00", "2024-01-01T07:00:00", "2024-01-01T08:00:00"]
    assert set(f["quantiles"]) == {"0.1", "0.9"}
    table = pa.ipc.open_stream(answer_to_arrow(out)).read_all()
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


def test_each_forecast_says_what_history_it_used():
    """history_length / last_timestamp per series (not the lookback cap), and a short
    history is a warning, not a silent forecast."""
    gw, _, _ = fake_gateway(min_history_warning=32)
    ts = [f"2024-01-01T{h:02d}:00:00" for h in range(6)]
    req = ForecastRequest(
        series=[
            {
                "symbol": "MINE", "timestamps": ts, "open": [1] * 6, "high": [2] * 6,
                "low": [0.5] * 6, "close": [1] * 6,
            }
        ],
        horizon=2,
    )
    out = asyncio.run(gw.forecast(req))
    assert out.timing["lookback"] == 62 and out.history_length == [6]
    f = answer_to_json(out)["forecasts"][0]
    assert f["history_length"] == 6 and f["last_timestamp"] == "2024-01-01T05:00:00"
    assert [w["code"] for w in f["warnings"]] == ["short_history"] and "6 candles" in f["warnings"][
        0
    ]["message"]
    inputs = pa.ipc.open_stream(answer_to_arrow(out)).read_all().schema.metadata[b"kronos.inputs"]
    assert b'"history_length":6' in inputs and b"short_history" in inputs
    # a long enough store series carries no warning
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2, lookback=40)))
    assert out.history_length == [40] and out.warnings == [[]]


def test_as_of_past_the_end_of_the_data_is_a_stale_warning():
    gw, _, _ = fake_gateway()
    store = gw.store  # hourly 2024-01-01 00:00 .. 300 candles
    last = store.idx[-1]
    inside = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2, lookback=40,
                                                     as_of=store.idx[100])))
    assert inside.warnings == [[]] and inside.last_timestamp[0] == store.idx[100].to_datetime64()
    within_a_candle = asyncio.run(gw.forecast(
        ForecastRequest(symbols=["S001"], horizon=2, lookback=40,
                        as_of=last + pd.Timedelta("30min"))))
    assert within_a_candle.warnings == [[]]
    late = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2, lookback=40,
                                                   as_of="2025-01-01T00:00")))
    assert [[w["code"] for w in ws] for ws in late.warnings] == [["stale"]] * 2
    message = late.warnings[0][0]["message"]
    assert f"last candle {last}: at least 4096 candles missed up to the request's as_of" in message
    assert late.as_of == last.to_datetime64()  # the portfolio's as-of: where its data ends
    assert late.last_timestamp[0] == last.to_datetime64()


def test_exchange_reaches_the_future_timestamps_from_the_request_or_the_metadata():
    calls = []

    def fn(history, horizon, **kw):
        calls.append(kw.get("exchange"))
        return fake_future(history, horizon)

    class TaggedStore(FakeStore):
        def read_windows(self, symbols, lookback, as_of=None, frequency=None):
            batch = super().read_windows(symbols, lookback, as_of, frequency)
            batch.windows = [
                dataclasses.replace(
                    w,
                    metadata={"timezone": None, "exchange": "XNAS" if w.symbol == "S001" else None},
                )
                for w in batch.windows
            ]
            return batch

    gw, _, _ = fake_gateway()
    gw.store, gw._future = TaggedStore(), FutureTimestamps(fn)
    asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2)))
    assert calls == ["XNAS", None]  # the store's metadata names S001's venue
    calls.clear()
    asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002"], horizon=2, exchange="XNYS")))
    assert calls == ["XNYS"]  # the request's wins (one call: both symbols share the calendar)


def test_an_exchange_calendar_skips_the_holiday_and_an_unknown_one_is_a_422():
    pytest.importorskip("exchange_calendars")
    gw, _, _ = fake_gateway()
    gw._future = FutureTimestamps()  # the real future_timestamps
    days = pd.bdate_range("2024-05-01", "2024-07-03")
    rows = [[d.isoformat(), 1.0, 2.0, 0.5, 1.5, 10.0] for d in days]
    req = ForecastRequest(series=[{"symbol": "SPY", "candles": rows}], horizon=3, exchange="XNYS")
    out = asyncio.run(gw.forecast(req))
    assert [str(pd.Timestamp(t).date()) for t in out.timestamps[0]] == [
        "2024-07-05", "2024-07-08", "2024-07-09",
    ]
    with pytest.raises(RequestInvalid) as ei:
        asyncio.run(gw.forecast(req.model_copy(update={"exchange": "NOPE"})))
    assert ei.value.field == "exchange"
    # a venue the library knows but cannot build here (Athens: Orthodox Easter on pandas 3) was a
    # 500 found by Schemathesis; now a 422 naming the field, and the schema does not offer it
    with pytest.raises(RequestInvalid, match="ASEX calendar cannot be built") as ei:
        asyncio.run(gw.forecast(req.model_copy(update={"exchange": "ASEX"})))
    assert ei.value.field == "exchange"
    enum = next(
        alt
        for alt in ForecastRequest.model_json_schema()["properties"]["exchange"]["anyOf"]
        if alt.get("type") == "string"
    )["enum"]
    assert "XNYS" in enum and "ASEX" not in enum and "XTAE" not in enum


def test_session_clock_reaches_future_timestamps_through_the_real_store(tmp_path):
    """A real KlineStore: EURUSD (UTC stamps, New York sessions in its metadata) gets its
    future stamps on New York's clock, the same candles without that metadata do not. The week
    after 2017-11-03 reopens at 17:00 New York = 22:00 UTC (daylight saving ends Nov 5)."""
    from kronos_core.data.sample_store import REAL_DIR
    from kronos_core.data.store import KlineStore
    from kronos_core.data.timestamps import future_timestamps
    from kronos_core.data.validate import validate_candles

    frame, _, _ = validate_candles(
        pd.read_csv(REAL_DIR / "eurusd_hourly.csv"), source="eurusd_hourly.csv"
    )
    store = KlineStore(tmp_path)
    store.write(
        "EURUSD", frame, frequency="1h", timezone="UTC",
        extra_metadata={"session_timezone": "America/New_York"}, fsync=False,
    )
    store.write("EURUSD.UTC", frame, frequency="1h", timezone="UTC", fsync=False)
    reps = FakeReplicas()
    gw = ForecastPipeline(Settings(max_context=512), store, reps, Metrics(), num_replicas=1,
                 fit_factory=lambda info, h, sc: (lambda L: 8))
    as_of, lookback, horizon = pd.Timestamp("2017-11-03 12:00"), 200, 24
    out = asyncio.run(
        gw.forecast(
            ForecastRequest(
                symbols=["EURUSD", "EURUSD.UTC"], as_of=as_of.isoformat(), lookback=lookback,
                horizon=horizon,
            )
        )
    )
    assert out.symbols == ["EURUSD", "EURUSD.UTC"] and out.errors == []
    hist = pd.DatetimeIndex(
        store.read_windows(["EURUSD"], lookback, as_of=as_of).windows[0].timestamps
    )
    ny = pd.DatetimeIndex(
        future_timestamps(hist, horizon, timezone="UTC", session_timezone="America/New_York")
    )
    plain = pd.DatetimeIndex(future_timestamps(hist, horizon))
    ny = ny.tz_convert("UTC").tz_localize(None) if ny.tz is not None else ny
    plain = plain.tz_convert("UTC").tz_localize(None) if plain.tz is not None else plain
    assert list(ny) != list(plain)  # precondition: the clock matters here
    assert list(pd.DatetimeIndex(out.timestamps[0])) == list(ny)
    assert list(pd.DatetimeIndex(out.timestamps[1])) == list(plain)
    assert pd.Timestamp("2017-11-05 22:00") in ny and pd.Timestamp("2017-11-05 21:00") not in ny
