"""Store versions in the service: every forecast answer names the one store version its windows
came from (``store_version``), forecasts made while imports publish never mix two versions, and
``/v1/symbols`` lists the current version (it was cached until a restart). The store, its
imports, the gateway's read and the answer are the real ones; the replicas run a fake model."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from service_fakes import fake_gateway

from kronos_core.data.importer import import_files
from kronos_core.data.store_reader import KlineReader
from service.common.schemas import ForecastRequest
from service.gateway.encode import answer_to_json

DAYS = pd.bdate_range("2024-01-02", periods=40)
SYMS = [f"S{i:02d}" for i in range(12)]


def _day_files(folder: Path, days: pd.DatetimeIndex, symbols=SYMS) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, sym in enumerate(symbols):
        px = 50.0 + k + np.arange(len(days)) * 0.1
        df = pd.DataFrame({"timestamps": days.strftime("%Y-%m-%d"), "open": px, "high": px + 1,
                           "low": px - 1, "close": px + 0.5, "volume": 100.0})
        p = folder / f"{sym}.csv"
        df.to_csv(p, index=False)
        out.append(p)
    return out


@pytest.fixture
def store(tmp_path) -> Path:
    root = tmp_path / "store"
    assert all(o.ok for o in import_files(_day_files(tmp_path / "base", DAYS[:30]), root,
                                          progress=False))
    return root


def test_forecasts_during_imports_never_mix_versions(store, tmp_path):
    gw, _, _ = fake_gateway()
    gw.store = KlineReader(store)
    day_of_version = {1: DAYS[29]}
    imports = []
    for i in range(30, 38):
        imports.append(_day_files(tmp_path / f"d{i}", DAYS[i:i + 1]))
        day_of_version[i - 28] = DAYS[i]
    answers = []
    stop = threading.Event()
    req = ForecastRequest(symbols=SYMS, horizon=2, record=False)

    def loop():
        async def run():
            while not stop.is_set():
                answers.append(await gw.forecast(req))

        asyncio.run(run())

    t = threading.Thread(target=loop)
    t.start()
    try:
        for files in imports:
            assert all(o.ok for o in import_files(files, store, progress=False))
    finally:
        stop.set()
        t.join()
    assert len(answers) >= 3
    for a in answers:
        assert a.errors == [] and a.symbols == SYMS
        last = {str(ts)[:10] for ts in a.last_timestamp}
        assert last == {str(day_of_version[a.store_version].date())}, (a.store_version, last)
    assert answer_to_json(answers[-1])["store_version"] == answers[-1].store_version


def test_inline_answers_name_no_store_version():
    gw, _, _ = fake_gateway()
    idx = pd.date_range("2024-01-01", periods=40, freq="h")
    series = [{"symbol": "X", "candles": [[str(t), 1.0, 2.0, 0.5, 1.5] for t in idx]}]
    a = asyncio.run(gw.forecast(ForecastRequest(series=series, horizon=2, record=False)))
    assert a.symbols == ["X"] and a.store_version is None


def test_symbols_list_follows_the_store_version(store, tmp_path):
    pytest.importorskip("ray.serve")
    from test_app import FakeHandle, _ingress, _run_shard

    ing = _ingress(FakeHandle(_run_shard))
    ing.store = KlineReader(store)

    def page():
        return orjson.loads(asyncio.run(ing.symbols(limit=100, offset=0)).body)

    first = page()
    assert first["total"] == 12 and first["store_version"] == 1
    assert all(o.ok for o in import_files(_day_files(tmp_path / "new", DAYS[:30], ["NEW1"]),
                                          store, progress=False))
    second = page()
    assert second["total"] == 13 and "NEW1" in second["symbols"] and second["store_version"] == 2
