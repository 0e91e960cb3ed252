"""An inline series named with an A-share suffix (``600000.SH``) and no ``exchange`` in the
request gets its venue's calendar from the suffix (issue 52): its forecast steps over China's
National Day week, as an imported ``.SH`` file's does; the request's ``exchange`` still wins."""

import pandas as pd
import pytest

from kronos_core.data.store import KlineStore
from service.common.schemas import ForecastRequest
from service.gateway.future import FutureTimestamps
from service.gateway.prepare import prepare

pytest.importorskip("exchange_calendars")

# XSHG sessions to Monday 2024-09-30, the last before the National Day week (next: 10-08)
DAYS = [d for d in pd.bdate_range("2024-08-01", "2024-09-30") if str(d.date()) not in
        ("2024-09-16", "2024-09-17")]  # the Mid-Autumn Festival


def _dates(symbol: str, tmp_path, exchange: str | None = None) -> list[str]:
    rows = [[d.isoformat(), 10.0, 10.2, 9.9, 10.1, 1e5] for d in DAYS]
    req = ForecastRequest(series=[{"symbol": symbol, "candles": rows}], horizon=2,
                          exchange=exchange)
    out = prepare(req, 64, KlineStore(tmp_path / "empty"), FutureTimestamps(),
                  min_history_warning=8)
    assert not out.errors
    return [str(pd.Timestamp(t).date()) for t in out.y_ts[0]]


def test_an_inline_series_takes_its_calendar_from_the_suffix(tmp_path):
    assert _dates("600000.SH", tmp_path) == ["2024-10-08", "2024-10-09"]
    assert _dates("000001.sz", tmp_path) == ["2024-10-08", "2024-10-09"]
    # no suffix, no exchange: the learned weekday template knows no holiday
    assert _dates("600000", tmp_path) == ["2024-10-01", "2024-10-02"]
    # the request's exchange wins over the suffix
    assert _dates("600000.SH", tmp_path, exchange="XNYS") == ["2024-10-01", "2024-10-02"]
