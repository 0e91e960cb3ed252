"""The seams of ``service.common.interfaces``: production classes and the test fakes implement the
same protocols, checked with ``isinstance`` on the runtime-checkable protocols and by the
parameter names of every protocol method."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from service_fakes import FakePredictor, FakeReplicas, FakeStore, RoutedReplicas

from kronos_core.base.errors import ErrorCode
from kronos_core.base.options import ForecastOptions
from kronos_core.data.store import KlineStore, SymbolError, SymbolWindow, WindowBatch
from kronos_core.data.store_reader import KlineReader
from kronos_core.engine.generate import EngineStats
from kronos_core.predictor import ForecastResult, KronosPredictor
from service.common import interfaces as seams

PROTOCOL_METHODS = {
    seams.CandleStore: ("symbols", "read_windows", "metadata"),
    seams.Replicas: ("forecast_shard", "describe"),
    seams.ForecastEngine: ("start_forecast",),
}


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def _implements(cls, proto) -> None:
    """Every protocol method exists on ``cls`` with the protocol's parameters, in order, takes no
    ``**kwargs`` that would hide a parameter the caller passes, and is async exactly where the
    protocol's is."""
    for name in PROTOCOL_METHODS[proto]:
        want, got = getattr(proto, name), getattr(cls, name)
        assert _params(got)[: len(_params(want))] == _params(want), (cls, name)
        kinds = [p.kind for p in inspect.signature(got).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds, (cls, name, "takes **kwargs")
        assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(want), (cls, name)


def test_store_and_its_fake_are_candle_stores(tmp_path):
    store, fake = KlineStore(tmp_path), FakeStore()
    assert isinstance(store, seams.CandleStore) and isinstance(fake, seams.CandleStore)
    _implements(KlineStore, seams.CandleStore)
    _implements(KlineReader, seams.CandleStore)  # what the service holds
    assert isinstance(KlineReader(tmp_path), seams.CandleStore)
    _implements(FakeStore, seams.CandleStore)
    window = SymbolWindow("S", np.zeros((0, 6), np.float32), np.zeros(0, "datetime64[ns]"), {},
                          np.datetime64(0, "ns"))
    real = WindowBatch([window], [SymbolError("X", ErrorCode.UNKNOWN_SYMBOL, "x")])
    fake_batch = fake.read_windows(["S001", "NOPE"], 5)
    for batch in (real, fake_batch):
        assert isinstance(batch, seams.Windows)
        assert all(isinstance(e, seams.SymbolFailure) for e in batch.errors)
        assert all(isinstance(w, seams.SymbolWindowView) for w in batch.windows)
    assert fake_batch.errors[0].code is ErrorCode.UNKNOWN_SYMBOL
    assert len(fake_batch.windows) == len(fake_batch.symbols) == 1


def test_replica_deployment_adapter_and_fake_are_replicas():
    pytest.importorskip("ray")
    from service.replica.deployment import Predictor
    from service.serve_replicas import ServeReplicas

    assert isinstance(FakeReplicas(), seams.Replicas) and isinstance(
        RoutedReplicas(), seams.Replicas
    )
    assert isinstance(ServeReplicas(None, None, None), seams.Replicas)
    for cls in (Predictor.func_or_class, ServeReplicas, FakeReplicas, RoutedReplicas):
        _implements(cls, seams.Replicas)


def test_engine_and_fake_engine():
    assert isinstance(FakePredictor(), seams.ForecastEngine)
    _implements(KronosPredictor, seams.ForecastEngine)
    _implements(FakePredictor, seams.ForecastEngine)
    z = np.zeros((1, 1, 1, 6), np.float32)
    real = ForecastResult(z, z[0], z, (), EngineStats())
    fake = FakePredictor().forecast(
        [np.ones((4, 6), np.float32)], [None], [None], ForecastOptions(2)
    )
    for res in (real, fake):
        assert isinstance(res, seams.EngineResult) and isinstance(res.stats, seams.EngineStatsView)


def test_a_missing_method_is_caught():
    class NoMetadata:
        def symbols(self, frequency=None):
            return []

        def read_windows(self, symbols, lookback, as_of=None, frequency=None):
            return None

    assert not isinstance(NoMetadata(), seams.CandleStore)
    with pytest.raises(AttributeError):
        _implements(NoMetadata, seams.CandleStore)
