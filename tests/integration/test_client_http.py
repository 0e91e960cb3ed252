"""``KronosClient`` against the integration session's service: its frame equals what
``KronosPredictor.forecast`` gives locally for the same windows, seed and options
(``ForecastResult.to_frame``), column for column, quantile columns included; per-symbol errors
come beside it. Retry-After against a service that sheds: test_ui_keys.py (a rate-limited key).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def test_client_frame_equals_the_local_predictor_s(live_service):
    from kronos_core import load_predictor
    from kronos_core.base.options import ForecastOptions
    from kronos_core.client import KronosClient
    from service.gateway import FutureTimestamps

    held = live_service.store.symbols()
    # GOOG (in the sample store): a real venue's calendar gives its future times
    symbols = [s for s in ("GOOG",) if s in held] + held[40:44]
    opts = {"lookback": 48, "sample_count": 3, "seed": 11, "quantiles": (0.1, 0.5, 0.9)}
    client = KronosClient(live_service.url, chunk_size=2)  # three requests
    out = client.forecast([*symbols, "NOPE"], 3, **opts)
    assert out.requests == 3 and out.retries == 0
    assert [e["symbol"] for e in out.errors] == ["NOPE"]
    assert out.errors[0]["code"] == "unknown_symbol"

    predictor = load_predictor(live_service.settings.predictor_config(device="cpu"))
    assert out.model["sha256"] == predictor.identity.sha256
    batch = live_service.store.read_windows(symbols, opts["lookback"])
    future = FutureTimestamps()
    series, xts, yts = [], [], []
    for w in batch.windows:  # the future times as the gateway makes them (calendar, session)
        meta = w.metadata
        session = (
            (meta.get("timezone"), meta["session_timezone"]) if meta.get("session_timezone")
            else None
        )
        series.append(np.asarray(w.values, np.float32))
        xts.append(pd.DatetimeIndex(w.timestamps))
        # without a calendar the sessions come from the stored history before the window
        history = w.timestamps if w.template_stamps is None else w.template_stamps
        yts.append(future(np.asarray(history), 3, session, meta.get("exchange")))
    options = ForecastOptions(3, sample_count=3, seed=11, quantiles=(0.1, 0.5, 0.9))
    local = predictor.forecast(series, xts, yts, options).to_frame(batch.symbols, yts)
    assert list(out.frame.columns) == list(local.columns)
    pd.testing.assert_frame_equal(out.frame, local, check_exact=False, rtol=1e-5, atol=1e-5)
    assert [i["history_length"] for i in out.inputs] == [48] * len(symbols)
    np.testing.assert_allclose(
        [i["last_close"] for i in out.inputs], [s[-1, 3] for s in series], rtol=1e-6
    )
