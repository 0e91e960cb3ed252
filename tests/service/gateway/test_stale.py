"""Stale symbols (issue 52): a stock suspended 10 XSHG sessions before the rest of its portfolio
gets a ``stale`` warning naming its last candle and the sessions missed, counted on its
exchange's calendar (its holidays are no missed sessions); ``exclude_stale`` leaves it out and
lists it in ``errors`` with code ``stale``; the answer carries the portfolio's as-of."""

import numpy as np
import pandas as pd
import pytest

from kronos_core.data.calendars import exchange_sessions
from kronos_core.data.store import KlineStore
from service.common.schemas import ForecastRequest
from service.gateway.future import FutureTimestamps
from service.gateway.prepare import prepare
from service.gateway.stale import MAX_COUNT, portfolio_as_of, slots_until


def _xshg_days(first: str, last: str) -> pd.DatetimeIndex:
    cal = exchange_sessions("XSHG")
    days = pd.DatetimeIndex((cal.day * 24 * 3600 * 10**9).astype("datetime64[ns]"))
    return days[(days >= first) & (days <= last)]


def _frame(days: pd.DatetimeIndex, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 10 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
    return pd.DataFrame({
        "timestamps": days, "open": close, "high": close * 1.01, "low": close * 0.99,
        "close": close, "volume": 1e6, "amount": close * 1e6,
    })


@pytest.fixture(scope="module")
def suspended_store(tmp_path_factory):
    """Three XSHG stocks to 2019-06-21; 600078.SH suspended after 2019-06-06 (the issue's)."""
    store = KlineStore(tmp_path_factory.mktemp("store"))
    days = _xshg_days("2018-06-01", "2019-06-21")
    for i, symbol in enumerate(["600000.SH", "600036.SH", "600519.SH"]):
        store.write(symbol, _frame(days, i), frequency="1d", extra_metadata={"exchange": "XSHG"})
    store.write("600078.SH", _frame(days[days <= "2019-06-06"], 9), frequency="1d",
                extra_metadata={"exchange": "XSHG"})
    return store


def _prepare(store, **kw):
    req = ForecastRequest(symbols=["600000.SH", "600078.SH", "600036.SH", "600519.SH"],
                          horizon=5, **kw)
    return prepare(req, 64, store, FutureTimestamps(), min_history_warning=8)


def test_a_suspended_stock_is_stale_and_its_neighbours_are_not(suspended_store):
    out = _prepare(suspended_store)
    assert out.symbols == ["600000.SH", "600078.SH", "600036.SH", "600519.SH"]
    assert out.as_of == np.datetime64("2019-06-21")  # the portfolio's as-of
    codes = [[w["code"] for w in ws] for ws in out.warnings]
    assert codes == [[], ["stale"], [], []]
    message = out.warnings[1][0]["message"]
    # 06-07 was the Dragon Boat holiday: 06-10..14 and 06-17..21 are the 10 sessions missed
    assert message.startswith("last candle 2019-06-06 00:00:00: 10 sessions missed up to the "
                              "portfolio's as-of 2019-06-21 00:00:00")
    assert "the XSHG calendar" in message
    # its forecast starts after its own last candle, on dates already past for the portfolio
    assert pd.Timestamp(out.y_ts[1][0]) == pd.Timestamp("2019-06-10")


def test_exclude_stale_leaves_it_out_and_lists_it(suspended_store):
    out = _prepare(suspended_store, exclude_stale=True)
    assert out.symbols == ["600000.SH", "600036.SH", "600519.SH"]
    assert out.warnings == [[], [], []]
    (err,) = out.errors
    assert err["symbol"] == "600078.SH" and err["code"] == "stale"
    assert "last candle 2019-06-06 00:00:00: 10 sessions missed" in err["message"]


def test_behind_the_requests_as_of_by_one_session_is_stale(suspended_store):
    # as_of 2019-06-10: the three others end there; 600078.SH missed one session (06-10)
    out = _prepare(suspended_store, as_of="2019-06-10T15:00")
    codes = [[w["code"] for w in ws] for ws in out.warnings]
    assert codes == [[], ["stale"], [], []]
    assert "1 sessions missed up to the request's as_of 2019-06-10 15:00:00" in (
        out.warnings[1][0]["message"]
    )
    # as_of on the holiday after its last candle: nothing missed, nothing said
    out = _prepare(suspended_store, as_of="2019-06-07T15:00")
    assert out.warnings == [[], [], [], []] and out.as_of == np.datetime64("2019-06-06")


def test_one_session_behind_the_portfolio_is_not_stale(suspended_store):
    # wall clocks of different markets: a symbol a day behind the others is not called stale
    days = _xshg_days("2019-01-02", "2019-06-20")
    suspended_store.write("601318.SH", _frame(days, 5), frequency="1d",
                          extra_metadata={"exchange": "XSHG"})
    req = ForecastRequest(symbols=["600000.SH", "601318.SH", "600036.SH"], horizon=5)
    out = prepare(req, 64, suspended_store, FutureTimestamps(), min_history_warning=8)
    assert out.warnings == [[], [], []]


def test_the_portfolio_as_of_is_where_most_series_reach():
    day = np.datetime64("2019-06-21", "ns")
    old = np.datetime64("2019-06-06", "ns")
    assert portfolio_as_of([old, day, day]) == day
    assert portfolio_as_of([old, old, day]) == old
    assert portfolio_as_of([day]) == day and portfolio_as_of([]) is None


def test_counting_asks_for_more_slots_only_while_all_are_behind():
    start = np.datetime64("2020-01-01", "ns")
    asked: list[int] = []

    def slots(n):
        asked.append(n)
        return start + np.arange(1, n + 1) * np.timedelta64(1, "D")

    first = slots(5)
    assert slots_until(slots, first, start + np.timedelta64(3, "D")) == 3 and asked == [5]
    assert slots_until(slots, first, start + np.timedelta64(100, "D")) == 100
    assert asked[1:] == [64, 512]
    assert slots_until(slots, first, start + np.timedelta64(10**4, "D")) == MAX_COUNT
