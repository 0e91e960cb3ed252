"""Evaluation's future timestamps come from the series' calendar as the service's do (issue 44):
a 5-minute crypto series from a store without an exchange, or from a CSV file, gets the last
context stamp + 5 minutes, never the template guessed from the window alone; a corpus row's
``calendar`` column (24/7, 24/5, XNYS, ...) is the exchange."""

import pandas as pd

from kronos_core.data.store import KlineStore
from kronos_core.eval.data import load_series
from kronos_core.eval.sources import corpus_meta
from kronos_core.eval.windows import build_windows
from tests.data.crypto_helpers import crypto_frame


def _first_steps(w) -> set:
    return {fut[0] - ctx[-1] for ctx, fut in zip(w.context_ts, w.future_ts)}


def test_store_and_file_series_step_five_minutes_on(tmp_path):
    frame = crypto_frame(start="2018-01-15 21:00", days=11)
    KlineStore(tmp_path / "store").write("ADA-BTC", frame, frequency="5min", timezone="UTC")
    frame.to_csv(tmp_path / "ADA-BTC.csv", index=False)
    for src in (tmp_path / "store", tmp_path / "ADA-BTC.csv"):
        series = load_series([src])
        assert series[0].meta.get("sessions") == "24/7", src
        # 20 windows, 3 hours apart: several end on the weekend or at night
        w = build_windows(series, lookback=251, horizon=3, windows=20, step=36)
        assert len(w) == 20
        assert _first_steps(w) == {pd.Timedelta("5min")}, src


def test_corpus_calendar_column_is_the_exchange():
    assert corpus_meta({"calendar": "24/7", "timezone": "UTC"}) == {"exchange": "24/7",
                                                                     "timezone": "UTC"}
    assert corpus_meta({"calendar": "XNYS", "timezone": "America/New_York"})["exchange"] == "XNYS"
    # a name the calendar library does not know: sessions learned from each window, as before
    assert "exchange" not in corpus_meta({"calendar": "CME Globex", "timezone": "UTC"})


def test_without_a_calendar_sessions_come_from_the_history_before_each_origin(tmp_path):
    """As the service's: a short window of 5-minute A-share bars does not see the sessions after
    its last bar; the history before the origin does (``template_history``)."""
    from tests.service.gateway.test_prepare_calendar import _a_share_5min

    frame = _a_share_5min()
    KlineStore(tmp_path / "store").write("SZ000001", frame, frequency="5min",
                                         timezone="Asia/Shanghai")
    series = load_series([tmp_path / "store"])
    assert not series[0].meta.get("exchange") and not series[0].meta.get("sessions")
    w = build_windows(series, lookback=32, horizon=3, windows=30, step=7)
    stamps = list(frame["timestamps"])
    for ctx, fut in zip(w.context_ts, w.future_ts):
        k = stamps.index(pd.Timestamp(ctx[-1]))
        assert list(pd.DatetimeIndex(fut)) == stamps[k + 1:k + 4]
