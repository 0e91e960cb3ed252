"""Stage 4, encode: an ``Outcome`` as the JSON answer or as an Arrow IPC stream (long format,
one row per symbol and step); both carry the same numbers, errors, model and timing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from kronos_core.options import quantile_label  # re-exported: service.gateway.quantile_label
from service.common.schemas import FEATURE_NAMES
from service.gateway.gather import Outcome


def _iso(ts: np.ndarray | Sequence[np.datetime64]) -> list[str]:
    return list(np.datetime_as_string(ts, unit="s"))


def _candles(a: np.ndarray) -> dict[str, np.ndarray]:
    # a: (H, 6) -> columns; contiguous float32 arrays (orjson serialises numpy natively)
    return {name: np.ascontiguousarray(a[:, k]) for k, name in enumerate(FEATURE_NAMES)}


def _inputs(out: Outcome, i: int) -> dict[str, Any]:
    """What series i's forecast was made from: its history length, last input candle, warnings."""
    return {
        "history_length": out.history_length[i],
        "last_timestamp": _iso(out.last_timestamp[i : i + 1])[0],
        "warnings": out.warnings[i],
    }


def outcome_to_json(out: Outcome) -> dict:
    forecasts = []
    for i, sym in enumerate(out.symbols):
        f: dict[str, Any] = {"symbol": sym, **_inputs(out, i), "timestamps": _iso(out.timestamps[i]),
                             "mean": _candles(out.mean[i])}
        q = out.quantiles[i]
        if q is not None:
            f["quantiles"] = {quantile_label(lv): _candles(q[k]) for k, lv in enumerate(out.quantile_levels)}
        p = out.paths[i]
        if p is not None:
            f["paths"] = [_candles(p[s]) for s in range(p.shape[0])]
        if out.summaries and out.summaries[i] is not None:
            f["summary"] = out.summaries[i]
        forecasts.append(f)
    return {"model": out.model, "calibrated": out.calibrated, "calibration_state": out.calibration_state,
            "request_id": out.request_id, "lookback": out.lookback, "forecasts": forecasts,
            "errors": out.errors, "timing": out.timing}


def summary_columns() -> list[tuple[str, Any]]:
    """``(column, Arrow type)`` of the risk-summary columns of the Arrow answer: ``summary_<field>``
    for every field of ``RISK_ARROW_SCHEMA`` but ``symbol`` (float64, ``vol_alert`` bool)."""
    from kronos_core.eval.risk import RISK_ARROW_SCHEMA

    return [(f"summary_{f.name}", f.type) for f in RISK_ARROW_SCHEMA if f.name != "symbol"]


def _summary_arrays(out: Outcome, h: int) -> dict[str, Any]:
    """The summary columns: each symbol's summary repeated on its ``h`` rows, null where the
    symbol has none (a summary that could not be computed, e.g. non-positive prices)."""
    import pyarrow as pa

    sums = out.summaries if len(out.summaries) == len(out.symbols) else [None] * len(out.symbols)
    cols = {}
    for name, typ in summary_columns():
        key = name.removeprefix("summary_")
        cols[name] = pa.array([None if s is None else s[key] for s in sums for _ in range(h)], typ)
    return cols


def outcome_to_arrow(out: Outcome) -> bytes:
    """Long format: one row per (symbol, step). Columns: symbol, step, timestamp, the six
    mean columns, then ``<feature>_q<level>`` per quantile (level as in ``quantile_label``),
    then with ``summary`` the ``summary_<field>`` columns (``summary_columns``; per symbol,
    the same on each of its rows, null when it has no summary). Errors, model, timing, lookback
    and each series' inputs (``{symbol, history_length, last_timestamp, warnings}``) are JSON
    in the schema metadata (``kronos.errors``, ``kronos.model``, ``kronos.timing``,
    ``kronos.lookback``, ``kronos.inputs``)."""
    import orjson
    import pyarrow as pa

    n = len(out.symbols)
    h = len(out.timestamps[0]) if n else 0
    sym_idx = np.repeat(np.arange(n, dtype=np.int32), h)
    cols: dict[str, pa.Array] = {
        "symbol": pa.DictionaryArray.from_arrays(pa.array(sym_idx, pa.int32()), pa.array(out.symbols, pa.string())),
        "step": pa.array(np.tile(np.arange(1, h + 1, dtype=np.int32), n)),
        "timestamp": pa.array(
            np.concatenate(out.timestamps) if n else np.array([], "datetime64[ns]"), pa.timestamp("ns")
        ),
    }
    mean = np.concatenate(out.mean, axis=0) if n else np.zeros((0, 6), np.float32)  # (n*H, 6)
    for k, name in enumerate(FEATURE_NAMES):
        cols[name] = pa.array(np.ascontiguousarray(mean[:, k]), pa.float32())
    if out.quantile_levels:  # the columns exist even when no symbol succeeded: one schema per request
        nq = len(out.quantile_levels)
        qs = cast(list[np.ndarray], out.quantiles)  # cast: with levels asked, every forecast has its quantiles
        q = np.concatenate(qs, axis=1) if n else np.zeros((nq, 0, 6), np.float32)  # (Q, n*H, 6)
        for qi, lv in enumerate(out.quantile_levels):
            for k, name in enumerate(FEATURE_NAMES):
                cols[f"{name}_q{quantile_label(lv)}"] = pa.array(np.ascontiguousarray(q[qi, :, k]), pa.float32())
    if out.summary:  # like the quantiles: the columns exist even when no symbol succeeded
        cols.update(_summary_arrays(out, h))
    meta = {
        b"kronos.model": orjson.dumps(out.model),
        b"kronos.errors": orjson.dumps(out.errors),
        b"kronos.timing": orjson.dumps(out.timing),
        b"kronos.calibrated": orjson.dumps(out.calibrated),
        b"kronos.calibration_state": orjson.dumps(out.calibration_state),
        b"kronos.request_id": orjson.dumps(out.request_id),
        b"kronos.lookback": orjson.dumps(out.lookback),
        b"kronos.inputs": orjson.dumps([{"symbol": sym, **_inputs(out, i)} for i, sym in enumerate(out.symbols)]),
    }
    table = pa.table(cols).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
