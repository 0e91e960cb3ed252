"""Stage encode (``service.gateway.encode``): the JSON answer and the Arrow stream carry the
same numbers, column by column, symbol by symbol and level by level."""

import dataclasses

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pytest
from response_checks import assert_arrow_equals_json

from service.common.answer import ForecastAnswer
from service.gateway.encode import (
    answer_to_arrow,
    answer_to_json,
    quantile_label,
    summary_columns,
)


def _outcome(
    n_symbols: int, levels: tuple[float, ...], horizon: int = 3, seed: int = 0
) -> ForecastAnswer:
    """An ForecastAnswer with a distinct random value in every cell, so a swapped column shows."""
    rng = np.random.default_rng(seed)
    syms = [f"SYM{i}" for i in range(n_symbols)]
    start = pd.Timestamp("2024-05-01 09:30")
    return ForecastAnswer(
        model={"name": "fake", "sha256": "ab" * 32},
        symbols=syms,
        timestamps=[
            pd.date_range(start + pd.Timedelta(days=i), periods=horizon, freq="h").to_numpy()
            for i in range(n_symbols)
        ],
        mean=[rng.normal(100, 5, (horizon, 6)).astype(np.float32) for _ in syms],
        quantile_levels=levels,
        quantiles=[
            rng.normal(100, 5, (len(levels), horizon, 6)).astype(np.float32) if levels else None
            for _ in syms
        ],
        paths=[None] * n_symbols,
        errors=[
            {"symbol": "GONE", "code": "unknown_symbol", "message": "GONE is not in the store"}
        ],
        timing={"total_ms": 1.5, "series": float(n_symbols)},
        history_length=[10 + i for i in range(n_symbols)],
        last_timestamp=[
            (start + pd.Timedelta(days=i, hours=-1)).to_datetime64() for i in range(n_symbols)
        ],
        warnings=[[] for _ in syms],
    )


def _wire_json(out: ForecastAnswer) -> dict:
    """answer_to_json as the client sees it: through orjson, like service.app._json."""
    return orjson.loads(
        orjson.dumps(
            answer_to_json(out), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        )
    )


@pytest.mark.parametrize("levels", [(), (0.1, 0.5, 0.9), (0.1234567, 0.1234568)])
def test_arrow_equals_json_every_column_symbol_and_level(levels):
    out = _outcome(4, levels)
    js = _wire_json(out)
    table = assert_arrow_equals_json(answer_to_arrow(out), js, levels, compare_timing=True)
    assert table.num_rows == 4 * 3
    assert len(table.column_names) == 3 + 6 * (1 + len(levels))


def test_arrow_quantile_columns_stay_distinct_for_close_levels():
    """0.1234567 and 0.1234568 are two levels: two JSON keys and two Arrow columns, each with its
    own values."""
    out = _outcome(2, (0.1234567, 0.1234568))
    js = _wire_json(out)
    assert list(js["forecasts"][0]["quantiles"]) == ["0.1234567", "0.1234568"]
    table = pa.ipc.open_stream(answer_to_arrow(out)).read_all()
    a, b = table.column("close_q0.1234567").to_numpy(), table.column("close_q0.1234568").to_numpy()
    np.testing.assert_array_equal(a, np.concatenate([q[0, :, 3] for q in out.quantiles]))
    np.testing.assert_array_equal(b, np.concatenate([q[1, :, 3] for q in out.quantiles]))
    assert quantile_label(0.1) == "0.1" and quantile_label(1 / 3) == repr(1 / 3)


def _with_summaries(out: ForecastAnswer, seed: int = 1) -> ForecastAnswer:
    """Distinct random risk summaries per symbol (the second symbol has none: null columns)."""
    rng = np.random.default_rng(seed)
    keys = (
        "expected_return", "p_up", "volatility", "horizon_volatility", "var_95", "es_95",
        "realized_volatility",
    )
    summaries = [
        None
        if i == 1
        else {
            **{k: float(rng.normal()) for k in keys}, "vol_alert": bool(i % 2),
            "sample_paths": 20 + i,
        }
        for i in range(len(out.symbols))
    ]
    return dataclasses.replace(out, summary=True, summaries=summaries)


@pytest.mark.parametrize("n_symbols", [0, 3])
def test_arrow_summary_columns_equal_json(n_symbols):
    out = _with_summaries(_outcome(n_symbols, (0.1, 0.9)))
    js = _wire_json(out)
    assert [("summary" in f) for f in js["forecasts"]] == [i != 1 for i in range(n_symbols)]
    table = assert_arrow_equals_json(
        answer_to_arrow(out), js, (0.1, 0.9), compare_timing=True, summary=True
    )
    assert table.column_names[-9:] == [name for name, _ in summary_columns()]
    if n_symbols:
        rows = table.column("summary_var_95").to_pylist()
        assert rows[:3] == [out.summaries[0]["var_95"]] * 3 and rows[3:6] == [None] * 3
        assert table.column("summary_vol_alert").to_pylist()[6:] == [False] * 3


def test_arrow_has_no_summary_columns_unless_asked():
    out = _outcome(2, ())
    assert not any(
        c.startswith("summary_")
        for c in pa.ipc.open_stream(answer_to_arrow(out)).read_all().column_names
    )


def test_arrow_equals_json_when_no_symbol_succeeded():
    out = _outcome(0, (0.25, 0.75))
    js = _wire_json(out)
    assert js["forecasts"] == [] and js["errors"][0]["symbol"] == "GONE"
    table = assert_arrow_equals_json(answer_to_arrow(out), js, (0.25, 0.75), compare_timing=True)
    assert table.num_rows == 0 and "close_q0.75" in table.column_names
