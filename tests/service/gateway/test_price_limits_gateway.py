"""Daily price limits through the gateway (``service.gateway``): each store symbol's rule comes
from its metadata and code, travels to the replica with its shard, and the answer names it per
forecast; a request's ``price_limits: false`` (or the deployment's ``KRONOS_PRICE_LIMITS``) turns
them off."""

from __future__ import annotations

import asyncio

import numpy as np
import pandas as pd
from service_fakes import fake_gateway

from kronos_core.data.store_reader import SymbolWindow
from service.common.schemas import ForecastRequest

# (no exchange: the fake future timestamps take none; the suffix names it)
META = {
    "600518.SH": {"special_treatment": True},
    "600000.SH": {},
    "300750.SZ": {},
    "AAPL": {},
}


class _AShareStore:
    """Four daily symbols with their metadata (the FakeStore's shape otherwise)."""

    root = "/srv/fake-store"

    def symbols(self, frequency=None):
        return list(META)

    def metadata(self, symbol, frequency=None):
        return {"timezone": None, **META[symbol]}

    def read_windows(self, symbols, lookback, as_of=None, frequency=None):
        from service_fakes import FakeWindowBatch

        idx = pd.bdate_range(end="2019-06-21", periods=40)
        windows = [
            SymbolWindow(s, np.full((lookback, 6), 3.0, np.float32),
                         idx[-lookback:].to_numpy("datetime64[ns]"),
                         {"timezone": None, **META[s]}, idx[-1].to_datetime64(), held=40)
            for s in symbols
        ]
        return FakeWindowBatch(windows)


def _answer(**kw):
    gw, _, reps = fake_gateway(**kw.pop("settings", {}))
    gw.store = _AShareStore()
    req = ForecastRequest(symbols=list(META), horizon=3, lookback=20, **kw)
    return asyncio.run(gw.forecast(req)), reps.runner


def test_each_forecast_names_its_rule_and_the_replica_gets_it():
    out, runner = _answer()
    assert out.symbols == list(META) and not out.errors
    by = dict(zip(out.symbols, out.price_limit, strict=True))
    assert by["600518.SH"]["rule"] == "main board ST ±5%"
    assert by["600518.SH"]["special_treatment"] is True and by["600518.SH"]["applied"] is True
    assert by["600518.SH"]["step_limits"] == [0.05, 0.05, 0.05]
    assert by["600000.SH"]["rule"] == "main board ±10%, ST status unknown"
    assert by["300750.SZ"]["rule"] == "ChiNext ±10%, ST status unknown"  # 2019: before reform
    assert by["AAPL"] is None
    given = [r for call in runner.predictor.price_limits for r in call]
    assert sorted(r.board if r else "-" for r in given) == ["-", "chinext", "main", "main"]


def test_a_request_turns_them_off():
    out, runner = _answer(price_limits=False)
    assert all(p is None or p["applied"] is False for p in out.price_limit)
    assert out.price_limit[0]["rule"] == "main board ST ±5%"  # the rule is still named
    assert all(r is None for call in runner.predictor.price_limits for r in call or [])
    assert all(not o.price_limits for o in runner.predictor.options)


def test_the_deployment_turns_them_off():
    out, runner = _answer(settings={"price_limits": False})
    assert all(p is None or p["applied"] is False for p in out.price_limit)
    assert all(r is None for call in runner.predictor.price_limits for r in call or [])
