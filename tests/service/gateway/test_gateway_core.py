"""The gateway's admission (``service.gateway.core``): the in-flight bound answers Overloaded,
the deployment's symbol limit names the field."""

import asyncio

import pytest
from service_fakes import FakeReplicas, fake_gateway, sample_value

from service.errors import Overloaded, RequestInvalid
from service.schemas import ForecastRequest


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
    assert asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2))).symbols == ["S001"]


def test_deployment_symbol_limit_names_field():
    gw, _, _ = fake_gateway(max_symbols=2)
    with pytest.raises(RequestInvalid) as ei:
        asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "S002", "S003"], horizon=2)))
    assert ei.value.field == "symbols"
