"""Stage gather (``service.gateway.gather``): results back in request order, a failed shard's
symbols reported with the replica's code."""

import asyncio

from service_fakes import FakeReplicas, fake_gateway, sample_value

from service.common.schemas import ForecastRequest


def test_forecast_in_request_order_with_unknown_symbols():
    gw, m, _ = fake_gateway()
    req = ForecastRequest(symbols=["S005", "NOPE", "S001", "S012", "ALSO_NOT"], horizon=4)
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == ["S005", "S001", "S012"]
    assert [float(a[0, 3]) for a in out.mean] == [105.0, 101.0, 112.0]  # close of the right symbol
    assert [e["symbol"] for e in out.errors] == ["NOPE", "ALSO_NOT"]
    assert {e["code"] for e in out.errors} == {"unknown_symbol"}
    assert out.timing["lookback"] == 60  # max_context - horizon by default
    assert len(out.timestamps[0]) == 4
    assert sample_value(m, "kronos_series_forecast_total") == 3
    assert sample_value(m, "kronos_errors_total", {"code": "unknown_symbol"}) == 2
    assert (
        sample_value(m, "kronos_batch_size_count", {"replica": "fake-replica"})
        == out.timing["shards"]
    )


def test_a_failed_shard_reports_the_replicas_code_not_its_wording():
    """The code comes from ShardResult.error_code: a forecast failure whose message happens to
    start like a retry failure stays forecast_failed."""

    class Failing(FakeReplicas):
        async def forecast_shard(self, shard):
            from kronos_core.base.errors import ErrorCode
            from service.common.messages import ShardResult

            return ShardResult(shard.request_id, shard.index, "r", None, None, None,
                               error="replica unavailable (a message, not a code)",
                               error_code=ErrorCode.FORECAST_FAILED)

    gw, m, _ = fake_gateway(Failing())
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2)))
    assert [e["code"] for e in out.errors] == ["forecast_failed"]
    assert sample_value(m, "kronos_errors_total", {"code": "forecast_failed"}) == 1
