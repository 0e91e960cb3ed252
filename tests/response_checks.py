"""Checks shared by the service unit and integration tests (imported as ``response_checks``;
``tests/`` is on the path through the root conftest)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

FEATURES = ("open", "high", "low", "close", "volume", "amount")
SUMMARY_FIELDS = ("expected_return", "p_up", "volatility", "horizon_volatility", "var_95", "es_95",
                  "realized_volatility", "vol_alert", "sample_paths")


def assert_arrow_equals_json(
    arrow: bytes, js: dict, quantiles: list[float] | tuple[float, ...] = (),
    compare_timing: bool = False,
    summary: bool = False,
) -> pa.Table:
    """The Arrow IPC answer holds exactly what the JSON answer holds: every symbol in order,
    every step and timestamp, every mean column and every quantile level of every feature,
    and the same errors and model in the schema metadata. ``quantiles``: the request's levels
    (the columns must exist even when no symbol succeeded). ``summary``: the request asked for
    risk summaries; each ``summary_<field>`` column then holds, on every row of a symbol, its
    JSON ``summary[field]`` (null where the JSON forecast has no summary). Returns the table."""
    table = pa.ipc.open_stream(arrow).read_all()
    forecasts = js["forecasts"]
    levels = [repr(float(q)) for q in sorted(quantiles)]
    for f in forecasts:
        assert list(f.get("quantiles") or {}) == levels, f"{f['symbol']}: JSON quantile keys"
    expected_cols = ["symbol", "step", "timestamp", *FEATURES]
    expected_cols += [f"{c}_q{lv}" for lv in levels for c in FEATURES]
    if summary:
        expected_cols += [f"summary_{k}" for k in SUMMARY_FIELDS]
    assert table.column_names == expected_cols
    h = len(forecasts[0]["timestamps"]) if forecasts else 0
    assert table.num_rows == len(forecasts) * h
    assert table.column("symbol").to_pylist() == [f["symbol"] for f in forecasts for _ in range(h)]
    assert table.column("step").to_pylist() == list(range(1, h + 1)) * len(forecasts)
    got_ts = pd.DatetimeIndex(table.column("timestamp").to_numpy())
    want_ts = pd.DatetimeIndex([t for f in forecasts for t in f["timestamps"]])
    assert list(got_ts) == list(want_ts)

    def col(name: str) -> np.ndarray:
        return table.column(name).to_numpy().astype(np.float32)

    for c in FEATURES:
        want = np.array([f["mean"][c] for f in forecasts], np.float32).reshape(-1)
        np.testing.assert_array_equal(col(c), want, err_msg=f"mean column {c}")
        for lv in levels:
            want = np.array([f["quantiles"][lv][c] for f in forecasts], np.float32).reshape(-1)
            np.testing.assert_array_equal(
                col(f"{c}_q{lv}"), want, err_msg=f"quantile column {c}_q{lv}"
            )
    if summary:
        assert table.schema.field("summary_vol_alert").type == pa.bool_()
        for k in SUMMARY_FIELDS:
            want = [(f.get("summary") or {}).get(k) for f in forecasts for _ in range(h)]
            assert table.column(f"summary_{k}").to_pylist() == want, f"summary column {k}"
    meta = table.schema.metadata
    assert json.loads(meta[b"kronos.errors"]) == js["errors"]
    assert json.loads(meta[b"kronos.model"]) == js["model"]
    if compare_timing:
        assert json.loads(meta[b"kronos.timing"]) == js["timing"]
    return table
