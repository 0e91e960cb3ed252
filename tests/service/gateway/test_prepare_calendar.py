"""The prepare stage's future timestamps for a 5-minute crypto series stored without an exchange
(issue 44): served from a real Arrow store, its first forecast stamp is the last candle + 5
minutes, from the ``24/7`` the store inferred from the whole history; ``"exchange": "24/7"`` and
``"24/5"`` are valid requests."""

import pandas as pd
import pytest
from pydantic import ValidationError

from kronos_core.data.store import KlineStore
from service.common.errors import RequestInvalid
from service.common.schemas import ForecastRequest
from service.gateway.future import FutureTimestamps
from service.gateway.prepare import check_exchange, prepare
from tests.data.crypto_helpers import crypto_frame


def test_a_crypto_series_stored_without_an_exchange_is_stamped_five_minutes_on(tmp_path):
    store = KlineStore(tmp_path / "store")
    # ends Friday 2018-01-26 20:55, as ADA-BTC's window before the weekend
    frame = crypto_frame(start="2018-01-15 21:00", days=11)
    store.write("ADA-BTC", frame, frequency="5min", timezone="UTC")  # no exchange given
    req = ForecastRequest(symbols=["ADA-BTC"], lookback=251, horizon=5)
    out = prepare(req, 251, store, FutureTimestamps(), min_history_warning=64)
    assert not out.errors
    last = pd.Timestamp(out.x_ts[0][-1])
    assert last == frame["timestamps"].iloc[-1] and len(out.x_ts[0]) == 251
    want = [last + pd.Timedelta(minutes=5 * k) for k in range(1, 6)]
    assert list(pd.DatetimeIndex(out.y_ts[0])) == want


@pytest.mark.parametrize("name", ["24/7", "24/5"])
def test_round_clock_calendars_are_valid_request_exchanges(name):
    req = ForecastRequest(symbols=["ADA-BTC"], horizon=2, exchange=name)
    check_exchange(req.exchange)  # no RequestInvalid
    assert req.exchange == name


def test_other_slashes_and_unknown_venues_are_still_refused():
    with pytest.raises(ValidationError, match="exchange"):
        ForecastRequest(symbols=["A"], horizon=2, exchange="24/6")
    with pytest.raises(RequestInvalid, match="unknown exchange"):
        check_exchange("NOPE")


def _a_share_5min(days: int = 10) -> pd.DataFrame:
    """5-minute A-share bars (09:35-11:30, 13:05-15:00, weekdays), no exchange known."""
    stamps = []
    for day in pd.bdate_range("2024-08-19", periods=days):
        for lo, hi in (("09:35", "11:30"), ("13:05", "15:00")):
            stamps += list(pd.date_range(f"{day.date()} {lo}", f"{day.date()} {hi}", freq="5min"))
    n = len(stamps)
    close = 10 + 0.01 * (pd.Series(range(n)) % 7)
    return pd.DataFrame({"timestamps": stamps, "open": close, "high": close + 0.02,
                         "low": close - 0.02, "close": close, "volume": 1000.0, "amount": 1e4})


def test_sessions_are_learned_from_the_stored_history_not_the_window_alone(tmp_path):
    """32 bars ending Friday 13:20 saw no afternoon past it: learned from that window alone, the
    next stamp was days away (the bug the two-clusters ledger test met); from the stored history
    before the origin it is 13:25, and no stamp after ``as_of`` is looked at."""
    store = KlineStore(tmp_path / "store")
    frame = _a_share_5min()
    store.write("SZ000001", frame, frequency="5min", timezone="Asia/Shanghai")
    as_of = pd.Timestamp("2024-08-30 13:20")
    req = ForecastRequest(symbols=["SZ000001"], lookback=32, horizon=3, as_of=as_of)
    out = prepare(req, 32, store, FutureTimestamps(), min_history_warning=8)
    assert not out.errors and pd.Timestamp(out.x_ts[0][-1]) == as_of
    after = frame["timestamps"][frame["timestamps"] > as_of]
    assert list(pd.DatetimeIndex(out.y_ts[0])) == list(after.iloc[:3])
    (win,) = store.read_windows(["SZ000001"], 32, as_of=as_of).windows
    assert win.template_stamps is not None and pd.Timestamp(win.template_stamps[-1]) == as_of
    assert len(win.template_stamps) == int((frame["timestamps"] <= as_of).sum())
    # an exchange in the metadata or the request: its calendar, no learned sessions
    store.write("SH600000", frame, frequency="5min", timezone="Asia/Shanghai",
                extra_metadata={"exchange": "XSHG"})
    (named,) = store.read_windows(["SH600000"], 32, as_of=as_of).windows
    assert named.template_stamps is None
