"""Hostile and unusual input at the gateway and schema level: inline series that fail
validation become per-series errors, the schema states what the server enforces, integers
beyond 64 bits are 422 material, and no server path reaches a client."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from service_fakes import FakeReplicas, FakeStore, fake_future

from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.future import FutureTimestamps
from service.gateway.gather import public_message

HUGE = 10**30  # beyond 64 bits


def _rows(n=8, start_hour=0, close=1.0, width=7):
    rows = []
    for h in range(n):
        row = [f"2024-01-01T{start_hour + h:02d}:00:00", 1.0, 2.0, 0.5, close, 10.0, 15.0]
        rows.append(row[:width])
    return rows


def _gateway():
    gw = ForecastPipeline(
        Settings(max_context=64), FakeStore(), FakeReplicas(), Metrics(), num_replicas=2,
        fit_factory=lambda info, h, sc: lambda L: 3, future=FutureTimestamps(fake_future),
    )
    return gw


def test_schema_makes_inline_series_rectangular_and_sources_exclusive():
    schema = ForecastRequest.model_json_schema()
    row = schema["$defs"]["InlineSeries"]["properties"]["candles"]["items"]
    widths = sorted(alt["minItems"] for alt in row["anyOf"])
    assert widths == [5, 6, 7]
    assert all(
        alt["minItems"] == alt["maxItems"] and len(alt["prefixItems"]) == alt["minItems"]
        for alt in row["anyOf"]
    )
    assert schema["properties"]["symbols"]["uniqueItems"] is True
    assert {tuple(b["required"]) for b in schema["oneOf"]} == {("symbols",), ("series",)}
    q = schema["properties"]["quantiles"]["items"]
    assert q["exclusiveMinimum"] == 0 and q["exclusiveMaximum"] == 1


def test_rows_and_legacy_columns_give_the_same_candles():
    rows = _rows(4)
    legacy = {
        "symbol": "X", "timestamps": [r[0] for r in rows],
        **{
            k: [r[i + 1] for r in rows]
            for i, k in enumerate(("open", "high", "low", "close", "volume", "amount"))
        },
    }
    a = ForecastRequest(series=[{"symbol": "X", "candles": rows}], horizon=2)
    b = ForecastRequest(series=[legacy], horizon=2)
    assert a.series[0].candles == b.series[0].candles
    with pytest.raises(ValidationError, match="close has 3 values but timestamps has 4"):
        ForecastRequest(series=[{**legacy, "close": legacy["close"][:3]}], horizon=2)


@pytest.mark.parametrize("field, value", [
    ("horizon", HUGE), ("lookback", HUGE), ("sample_count", HUGE), ("top_k", HUGE), ("seed", HUGE),
    ("seed", -HUGE), ("temperature", HUGE), ("top_p", 10**400), ("quantiles", [HUGE]),
])
def test_integers_beyond_64_bits_are_validation_errors(field, value):
    with pytest.raises(ValidationError) as info:
        ForecastRequest.model_validate({"symbols": ["A"], "horizon": 2, field: value})
    assert field in str(info.value)


def test_huge_integers_inside_candles_are_validation_errors():
    rows = _rows(3)
    rows[1][4] = 10**400  # not representable as a float
    with pytest.raises(ValidationError):
        ForecastRequest(series=[{"symbol": "X", "candles": rows}], horizon=2)
    rows[1][4] = 1
    rows[1][0] = HUGE  # a timestamp as a number beyond any datetime
    with pytest.raises(ValidationError):
        ForecastRequest(series=[{"symbol": "X", "candles": rows}], horizon=2)


def test_explicit_null_source_is_refused():
    with pytest.raises(ValidationError, match="symbols is null"):
        ForecastRequest.model_validate(
            {"symbols": None, "series": [{"symbol": "X", "candles": _rows(3)}], "horizon": 2}
        )


def _bad_series():
    nan = _rows(6)
    nan[2][2] = math.nan
    inf = _rows(6)
    inf[4][4] = math.inf
    overflow = _rows(6)
    overflow[1][1] = 1e300  # finite in float64, infinite in float32
    unordered = _rows(6)
    unordered[3], unordered[4] = unordered[4], unordered[3]
    dup = _rows(6)
    dup[5][0] = dup[4][0]
    ancient = _rows(6)
    ancient[0][0] = "0001-01-01T00:00:00"  # outside datetime64[ns]
    derived = _rows(6, width=6)  # rows without an amount: the gateway derives volume x mean price
    # each value fits float32, their product does not
    derived[3][1:6] = [1e30, 1e30, 1e30, 1e30, 1e30]
    return {"NAN": (nan, "high[2] is NaN"), "INF": (inf, "close[4] is infinite"),
            "OVER": (overflow, "open[1] is infinite or beyond float32"),
            "UNORDERED": (unordered, "timestamps[4]"), "DUP": (dup, "timestamps[5]"),
            "ANCIENT": (ancient, "timestamps"),
            "DERIVED": (derived, "amount[3] was not given, and the derived volume × mean price")}


def test_invalid_inline_series_are_per_series_errors_and_the_rest_is_forecast():
    gw = _gateway()
    bad = _bad_series()
    series = [{"symbol": "GOOD1", "candles": _rows(6, close=3.0)}]
    series += [{"symbol": k, "candles": rows} for k, (rows, _) in bad.items()]
    series += [{"symbol": "GOOD2", "candles": _rows(6, close=5.0, width=5)},
               {"symbol": "GOOD1", "candles": _rows(6)}]  # a repeated name
    out = asyncio.run(gw.forecast(ForecastRequest(series=series, horizon=2)))
    assert out.symbols == ["GOOD1", "GOOD2"]
    assert float(out.mean[0][0, 3]) == 3.0 and float(out.mean[1][0, 3]) == 5.0
    assert float(out.mean[1][0, 4]) == 0.0  # 5-wide rows: volume = amount = 0
    errors = [(e["symbol"], e["code"], e["message"]) for e in out.errors]
    assert [s for s, _, _ in errors] == [*bad, "GOOD1"]
    assert {c for _, c, _ in errors} == {"invalid_series"}
    for sym, _, msg in errors[:-1]:
        assert bad[sym][1] in msg, (sym, msg)
    assert "repeats series[0]" in errors[-1][2]
    assert "repeats" in dict((s, m) for s, _, m in errors)["DUP"]
    assert "before" in dict((s, m) for s, _, m in errors)["UNORDERED"]


def test_a_request_with_no_usable_series_is_answered_with_every_series_in_errors():
    # the same rule as store symbols: no usable series is an answer with no forecasts, not a 422
    gw = _gateway()
    bad = _bad_series()
    req = ForecastRequest(
        series=[{"symbol": k, "candles": rows} for k, (rows, _) in bad.items()], horizon=2
    )
    out = asyncio.run(gw.forecast(req))
    assert out.symbols == []
    assert [(e["symbol"], e["code"]) for e in out.errors] == [(k, "invalid_series") for k in bad]
    for e, (_candles, expected) in zip(out.errors, bad.values(), strict=True):
        assert expected in e["message"]
    assert out.errors[0]["message"].startswith("series[0]: high[2] is NaN")
    single = ForecastRequest(series=[{"symbol": "DUP", "candles": bad["DUP"][0]}], horizon=2)
    only = asyncio.run(gw.forecast(single))  # its only series: the same answer as beside a good one
    assert only.symbols == [] and [e["symbol"] for e in only.errors] == ["DUP"]
    assert "timestamps[5]" in only.errors[0]["message"]


def test_a_null_value_is_that_series_error_naming_row_and_column():
    # JSON has no NaN: pandas' to_json writes a missing value as null
    import json

    good, gap = _rows(6, close=3.0), _rows(6)
    gap[3][4] = None
    body = json.loads(
        json.dumps(
            {
                "series": [
                    {"symbol": "GOOD", "candles": good}, {"symbol": "GAP", "candles": gap},
                    {"symbol": "GOOD5", "candles": _rows(6, width=5)},
                ],
                "horizon": 2,
            }
        )
    )
    out = asyncio.run(_gateway().forecast(ForecastRequest.model_validate(body)))
    assert out.symbols == ["GOOD", "GOOD5"]
    assert out.errors == [
        {
            "symbol": "GAP", "code": "invalid_series",
            "message": "series[1]: close[3] is null (1 bad value(s)); candles must be finite "
                       "numbers",
        }
    ]
    for width, column in [(5, "close"), (6, "volume"), (7, "amount")]:
        rows = _rows(4, width=width)
        # the last value of the row (a derived amount is not the one named)
        rows[2][width - 1] = None
        req = ForecastRequest(
            series=[{"symbol": "G", "candles": _rows(4)}, {"symbol": "N", "candles": rows}],
            horizon=1,
        )
        message = asyncio.run(_gateway().forecast(req)).errors[0]["message"]
        assert message.startswith(f"series[1]: {column}[2] is null"), message


def test_width_six_rows_fill_amount_from_volume():
    gw = _gateway()
    out = asyncio.run(
        gw.forecast(
            ForecastRequest(series=[{"symbol": "V", "candles": _rows(4, width=6)}], horizon=1)
        )
    )
    np.testing.assert_allclose(out.mean[0][0, 5], 10.0 * np.mean([1.0, 2.0, 0.5, 1.0]), rtol=1e-6)


@pytest.mark.parametrize(
    "message, root, expected",
    [
        (
            "unknown symbol 'NOPE' in store /root/.cache/kronos/sample-store-v1",
            "/root/.cache/kronos/sample-store-v1", "unknown symbol 'NOPE' in store sample-store-v1",
        ),
        (
            "AAPL: cannot open /srv/data/store/1h/AAPL.arrow: [Errno 2] gone", "/srv/data/store",
            "AAPL: cannot open 1h/AAPL.arrow: [Errno 2] gone",
        ),
        (
            "RuntimeError: in /usr/lib/python3/site-packages/torch/x.py, line 3", None,
            "RuntimeError: in x.py, line 3",
        ),
        ("ratio 1/2 at 2024-01-01T10:00:00", None, "ratio 1/2 at 2024-01-01T10:00:00"),
    ],
)
def test_public_messages_carry_no_server_paths(message, root, expected):
    assert public_message(message, root) == expected


def test_store_errors_reach_clients_without_paths(tmp_path):
    class RootedStore(FakeStore):
        def read_windows(self, symbols, lookback, as_of=None, frequency=None):
            batch = super().read_windows(symbols, lookback, as_of, frequency)
            for e in batch.errors:
                e.message = f"unknown symbol {e.symbol!r} in store {self.root}"
            return batch

    gw = _gateway()
    gw.store = RootedStore(root=tmp_path / "my-store")
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["S001", "NOPE"], horizon=2)))
    assert out.symbols == ["S001"]
    assert out.errors[0]["message"] == "unknown symbol 'NOPE' in store my-store"
    assert str(tmp_path) not in str(out.errors)


@pytest.mark.parametrize(
    "as_of",
    ["0001-01-01T00:00:00", "0321-10-22T16:00:01Z", "1500-06-01T00:00:00", "1677-12-31T23:59:59",
     "2262-01-01T00:00:00", "9999-12-31T23:59:59", "9999-12-31T00:00:00-23:00"],
)
def test_as_of_outside_the_stores_years_is_refused_naming_the_range(as_of):
    """Issue 52: a date the store cannot hold is the caller's error (a 422), no longer clamped
    to "everything" or "nothing" (a 500 on /v1/candles before)."""
    with pytest.raises(ValidationError) as err:
        ForecastRequest(symbols=["S001"], horizon=2, as_of=as_of)
    (e,) = err.value.errors()
    assert e["loc"] == ("as_of",) and "the year must be 1678 to 2261" in e["msg"]


@pytest.mark.parametrize("as_of", ["1678-01-01T00:00:00", "2024-01-01T00:00:00",
                                   "2261-12-31T23:59:59"])
def test_as_of_inside_the_stores_years_is_read_as_it_is(as_of):
    seen = []

    class Store(FakeStore):
        def read_windows(self, symbols, lookback, as_of=None, frequency=None):
            seen.append(as_of)
            return super().read_windows(symbols, lookback, as_of, frequency)

    gw = _gateway()
    gw.store = Store()
    asyncio.run(gw.forecast(ForecastRequest(symbols=["S001"], horizon=2, as_of=as_of)))
    assert seen == [pd.Timestamp(as_of)]


def test_a_non_finite_forecast_is_that_series_error_not_a_null():
    from service.common.messages import ShardResult

    gw = _gateway()
    inner = gw.replicas.forecast_shard

    async def nan_for_odd(shard):
        res = await inner(shard)
        res.mean = res.mean.copy()
        if shard.index % 2:
            res.mean[:, 0, 3] = np.nan  # every second shard: a NaN close
        return ShardResult(
            res.request_id, res.index, res.replica_id, res.mean, res.quantiles, res.paths,
            reports=res.reports,
        )

    gw.replicas.forecast_shard = nan_for_odd
    symbols = [f"S{i:03d}" for i in range(8)]
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=symbols, horizon=2)))
    assert len(out.symbols) + len(out.errors) == 8 and out.errors and out.symbols
    assert {e["code"] for e in out.errors} == {"forecast_failed"}
    assert all("NaN or infinite" in e["message"] for e in out.errors)
    assert all(np.isfinite(m).all() for m in out.mean)
