"""Daily price limits over real HTTP (the real service, the bundled default model): an inline
Shanghai stock's forecast names the rule it was held to and steps at most 10% a day, a US one
names none, ``price_limits: false`` says it was not applied, and ``/v1/models`` shows the
feature on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def _rows(n: int = 120, daily: float = -0.1) -> list[list]:
    """A run of limit-down days, then a rebound: the history that tempted the model into
    moves no exchange allows."""
    stamps = pd.bdate_range(end="2019-06-21", periods=n)
    moves = np.where(np.arange(n) < n - 3, daily / 4, 0.1)
    moves[n // 2:n - 3] = daily
    close = 30 * np.cumprod(1 + moves)
    prev = np.concatenate([[30.0], close[:-1]])
    return [[str(t.date()), float(o), float(max(o, c) * 1.01), float(min(o, c) * 0.99), float(c),
             1e6] for t, o, c in zip(stamps, prev, close)]


def _max_step(forecast: dict, last: float) -> float:
    """The largest |close / previous close - 1| of every path and step."""
    close = np.array([p["close"] for p in forecast["paths"]], dtype=np.float64)  # (S, H)
    prev = np.concatenate([np.full((len(close), 1), last), close[:, :-1]], axis=1)
    return float(np.abs(close / prev - 1).max())


def test_the_answer_names_the_rule_and_paths_stay_inside_it(live_service):
    c = live_service.client
    info = c.get("/v1/models").json()["models"][0]["price_limits"]
    assert info["enabled"] is True and "XSHG" in info["exchanges"]
    body = {"series": [{"symbol": "600518.SH", "candles": _rows()},
                       {"symbol": "AAPL", "candles": _rows()}],
            "horizon": 5, "sample_count": 16, "seed": 3, "return_paths": True, "summary": True}
    r = c.post("/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    st, us = r.json()["forecasts"]
    assert st["price_limit"]["rule"] == "main board ±10%, ST status unknown"
    assert st["price_limit"]["applied"] is True and st["price_limit"]["step_limits"] == [0.1] * 5
    assert us["price_limit"] is None
    assert _max_step(st, st["last_close"]) <= 0.10 + 1e-5
    off = c.post("/v1/forecast", json={**body, "price_limits": False}).json()["forecasts"][0]
    assert off["price_limit"]["applied"] is False
    assert off["price_limit"]["rule"] == "main board ±10%, ST status unknown"
