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
