"""What the gateway reads and says about each series' history (issue 26): a horizon past the
model's context is a 422 before anything is read, a history shorter than asked or than the
caller asked is a ``history_cut`` warning naming both lengths (never the model's default window,
issue 52), and an inline series that
skips sessions of its exchange gets a ``missing_sessions`` warning."""

import asyncio

import numpy as np
import pandas as pd
import pytest
from service_fakes import FakeStore, fake_future, fake_gateway

from service.common.errors import RequestInvalid
from service.common.schemas import ForecastRequest
from service.gateway.encode import answer_to_json
from service.gateway.future import FutureTimestamps


class CountingStore(FakeStore):
    def __init__(self):
        super().__init__()
        self.reads = 0

    def read_windows(self, *a, **k):
        self.reads += 1
        return super().read_windows(*a, **k)


def _codes(out) -> list[list[str]]:
    return [[w["code"] for w in ws] for ws in out.warnings]


def test_a_horizon_past_the_context_is_refused_before_any_read_or_shard():
    gw, _, replicas = fake_gateway()  # max_context 64
    gw.store = store = CountingStore()
    with pytest.raises(RequestInvalid) as err:
        asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=65)))
    assert err.value.field == "horizon" and "max_context 64" in err.value.message
    assert "at most 64" in err.value.message
    assert store.reads == 0 and replicas.calls == 0
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=64)))  # all the context
    assert out.symbols == ["S001"] and out.history_length == [2] and store.reads == 1


def test_the_default_window_cut_from_a_long_history_is_no_warning():
    """Issue 52: the model's default window is shorter than a long stored history on every
    request; a ``history_cut`` on every row taught people to ignore warnings. The answer's
    ``lookback`` says what was read and why."""
    gw, _, _ = fake_gateway()  # store symbols hold 300 candles; max_context 64
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=40)))
    assert out.history_length == [24] and _codes(out) == [["short_history"]]
    lookback = {"value": 24, "source": "default", "note": out.lookback["note"]}
    assert answer_to_json(out)["lookback"] == lookback and "horizon 40" in lookback["note"]
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=4)))
    assert out.history_length == [60] and out.warnings == [[]]


def test_a_lookback_longer_than_the_series_is_a_warning():
    gw, _, _ = fake_gateway()
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=4, lookback=400)))
    assert out.history_length == [300] and _codes(out) == [["history_cut"]]
    assert "300 candles, shorter than the lookback 400 asked" in out.warnings[0][0]["message"]
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=4, lookback=100)))
    assert out.warnings == [[]]  # what was asked, and the store holds more: nothing to say
    ts = [str(t) for t in pd.date_range("2024-01-01", periods=40, freq="h")]
    inline = {"symbol": "MINE", "candles": [[t, 1.0, 2.0, 0.5, 1.0] for t in ts]}
    out = asyncio.run(gw.forecast(ForecastRequest(series=[inline], horizon=4)))
    assert out.history_length == [40] and out.warnings == [[]]  # all it holds, within the context


def _daily_inline(exchange_days: pd.DatetimeIndex, drop: list[int]) -> dict:
    days = exchange_days.delete(drop)
    return {"symbol": "GAPPY", "candles": [[str(d), 10.0, 11.0, 9.0, 10.5, 100.0] for d in days]}


def test_an_inline_series_that_skips_sessions_of_its_exchange_is_warned():
    from kronos_core.data.calendars import exchange_sessions

    cal = exchange_sessions("XNYS")
    day_ns = 24 * 3600 * 10**9
    sessions = pd.DatetimeIndex((cal.day[(cal.day >= 19725) & (cal.day < 19725 + 90)] * day_ns)
                                .astype("datetime64[ns]"))  # about 60 NYSE sessions from 2024-01-03
    dropped = list(range(10, 30))
    gw, _, _ = fake_gateway()
    gw._future = FutureTimestamps(lambda history, horizon, **kw: fake_future(history, horizon))
    req = ForecastRequest(series=[_daily_inline(sessions, dropped)], horizon=2, exchange="XNYS")
    out = asyncio.run(gw.forecast(req))
    assert out.errors == [] and _codes(out) == [["missing_sessions"]]
    msg = out.warnings[0][0]["message"]
    assert msg.startswith(f"20 of the {len(sessions)} XNYS sessions")
    first = ", ".join(str(d.date()) for d in sessions[dropped[:5]])
    assert f"(first: {first}, ...)" in msg
    whole = ForecastRequest(series=[_daily_inline(sessions, [])], horizon=2, exchange="XNYS")
    assert asyncio.run(gw.forecast(whole)).warnings == [[]]
    # no exchange known: nothing is checked (sessions are then learned from the history)
    unknown = ForecastRequest(series=[_daily_inline(sessions, dropped)], horizon=2)
    assert asyncio.run(gw.forecast(unknown)).warnings == [[]]
    assert np.isfinite(out.mean[0]).all()
