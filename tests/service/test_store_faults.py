"""Faults while the service runs: a symbol's store file replaced by garbage or removed between
two requests is that symbol's error (the other symbols are still served); an out-of-memory in
a replica's batch splits it and the answer is complete."""

from __future__ import annotations

import asyncio
import os

import pandas as pd
from service_fakes import FakeReplicas, fake_future

from kronos_core.base.candles import FEATURES
from kronos_core.data.store import KlineStore
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.future import FutureTimestamps


def _store(tmp_path) -> KlineStore:
    store = KlineStore(tmp_path / "store")
    idx = pd.date_range("2024-01-01", periods=64, freq="h")
    for k, sym in enumerate(("AAA", "BBB", "CCC", "DDD")):
        frame = pd.DataFrame({"timestamps": idx, **{c: 100.0 + k for c in FEATURES}})
        store.write(sym, frame, frequency="1h", fsync=False)
    return store


def test_corrupted_and_removed_files_while_serving(tmp_path):
    store = _store(tmp_path)
    gw = ForecastPipeline(
        Settings(max_context=64), store, FakeReplicas(), Metrics(), num_replicas=2,
        fit_factory=lambda info, h, sc: lambda L: 3, future=FutureTimestamps(fake_future),
    )
    req = ForecastRequest(symbols=["AAA", "BBB", "CCC", "DDD"], horizon=2, lookback=16)
    assert asyncio.run(gw.forecast(req)).symbols == ["AAA", "BBB", "CCC", "DDD"]
    # a writer replaces BBB's file (atomic rename, as the store itself writes) with garbage; CCC is
    # deleted
    bad = store.path("BBB", "1h")
    tmp = bad.with_name(".BBB.tmp")
    tmp.write_bytes(b"not an arrow file at all" * 10)
    os.replace(tmp, bad)
    store.path("CCC", "1h").unlink()
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["AAA", "DDD"]
    codes = {e["symbol"]: e["code"] for e in out.errors}
    assert codes == {"BBB": "corrupt_file", "CCC": "unknown_symbol"}
    assert all(str(tmp_path) not in e["message"] for e in out.errors)  # no server paths


def test_simulated_out_of_memory_in_a_replica_splits_and_the_answer_is_complete(tmp_path):
    from service_fakes import FakePredictor

    from service.replica.step_runner import StepRunner

    replicas = FakeReplicas()
    predictor = FakePredictor(oom_above=1)  # any batch of 2+ series: torch.OutOfMemoryError
    replicas.runner = StepRunner(predictor, "fake-replica", "cpu")
    m = Metrics()
    gw = ForecastPipeline(
        Settings(max_context=64, shards_per_replica=1), _store(tmp_path), replicas, m,
        num_replicas=1, fit_factory=lambda info, h, sc: lambda L: 4,
        future=FutureTimestamps(fake_future),
    )
    out = asyncio.run(
        gw.forecast(ForecastRequest(symbols=["AAA", "BBB", "CCC", "DDD"], horizon=2, lookback=16))
    )
    assert out.symbols == ["AAA", "BBB", "CCC", "DDD"] and out.errors == []
    # each series its own answer
    assert [float(x[0, 3]) for x in out.mean] == [100.0, 101.0, 102.0, 103.0]
    # tried whole, then halved to singles
    assert max(predictor.calls) == 4 and predictor.calls.count(1) == 4
    assert m.registry.get_sample_value("kronos_oom_splits_total", {"replica": "fake-replica"}) >= 3
