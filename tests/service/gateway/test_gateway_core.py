"""The gateway's admission (``service.gateway.core``): the in-flight bound answers Overloaded,
the deployment's symbol limit names the field."""

import asyncio

import pytest
from service_fakes import FakeReplicas, fake_gateway, sample_value

from service.common.errors import Overloaded, RequestInvalid
from service.common.schemas import ForecastRequest


def test_inflight_bound_rejects_with_overloaded():
    gw, m, reps = fake_gateway(FakeReplicas(delay=0.2), max_inflight_requests=2)

    async def main():
        req = ForecastRequest(symbols=["S001"], horizon=2)
        return await asyncio.gather(*(gw.forecast(req) for _ in range(5)), return_exceptions=True)

    res = asyncio.run(main())
    rejected = [r for r in res if isinstance(r, Overloaded)]
    assert len(rejected) == 3 and all(r.retry_after_s >= 1 for r in rejected)
    assert sum(1 for r in res if not isinstance(r, Exception)) == 2
    assert sample_value(m, "kronos_queue_depth", {"stage": "requests"}) == 0
    # serves again afterwards
    assert asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2))).symbols == [
        "S001"
    ]


def test_deployment_symbol_limit_names_field():
    gw, _, _ = fake_gateway(max_symbols=2)
    with pytest.raises(RequestInvalid) as ei:
        asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002", "S003"], horizon=2)))
    assert ei.value.field == "symbols"


class _KindsStore:
    """A FakeStore whose symbols belong to three kinds (exchange, session clock); counts window
    reads."""

    def __init__(self, fail: bool = False):
        from service_fakes import FakeStore

        self.inner, self.fail, self.reads = FakeStore(n=9), fail, []
        self.root = self.inner.root

    def symbols(self, frequency=None):
        return self.inner.symbols()

    def metadata(self, symbol, frequency=None):
        kind = int(symbol[1:]) % 3
        return {**self.inner.metadata(symbol), "exchange": ["XNYS", None, None][kind],
                "session_timezone": [None, "America/New_York", None][kind]}

    def read_windows(self, symbols, lookback, as_of=None, frequency=None):
        self.reads.append(list(symbols))
        if self.fail:
            raise OSError("/srv/fake-store/S000.arrow: corrupt file")
        return self.inner.read_windows(symbols, lookback, as_of, frequency)


def test_warm_up_prepares_one_symbol_of_each_kind_before_the_first_request():
    gw, _, _ = fake_gateway()
    gw.store = store = _KindsStore()
    # one per (exchange, session clock), in store order
    assert gw.warm_up() == ["S000", "S001", "S002"]
    assert store.reads == [["S000", "S001", "S002"]]  # one window read of them, through prepare
    assert gw.warm_up(limit=2) == ["S000", "S001"]
    assert gw.warm_up(scan=2) == ["S000", "S001"]  # the kinds of the first symbols only


def test_warm_up_never_stops_the_start_and_names_no_server_path(caplog):
    gw, _, _ = fake_gateway()
    gw.store = _KindsStore(fail=True)
    assert gw.warm_up() == ["S000", "S001", "S002"]
    (rec,) = [r for r in caplog.records if "warm-up failed" in r.getMessage()]
    assert "corrupt file" in rec.getMessage() and "/srv/" not in rec.getMessage()
