"""Stage 4, encode: a ``ForecastAnswer`` as the JSON answer or as an Arrow IPC stream (long
format, one row per symbol and step); both carry the same numbers, errors, model and timing.
Both walk the answer's field declarations (``service.common.answer``): a field declared there is
encoded here without a change to this file."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from kronos_core.base.options import quantile_label  # re-exported: service.gateway.quantile_label
from service.common.answer import ForecastAnswer, Wire, wire_fields
from service.common.schemas import FEATURE_NAMES


def _value(answer: ForecastAnswer, wire: Wire, value: Any) -> Any:
    return value if wire.encode is None or value is None else wire.encode(value, answer)


def _symbol_json(answer: ForecastAnswer, i: int, fields: list[tuple[str, Wire]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, wire in fields:
        v = answer.per_symbol(attr, i)
        if v is None and wire.omit_none:
            continue
        out[wire.name] = _value(answer, wire, v)
    return out


def answer_to_json(answer: ForecastAnswer) -> dict:
    """The JSON answer (``ForecastResponse``): request-level fields, then ``forecasts`` (one object
    per symbol) before ``errors``, in declaration order."""
    per_symbol = wire_fields(per_symbol=True)
    body: dict[str, Any] = {}
    for attr, wire in wire_fields(per_symbol=False):
        if attr == "errors":
            body["forecasts"] = [
                _symbol_json(answer, i, per_symbol) for i in range(len(answer.symbols))
            ]
        body[wire.name] = _value(answer, wire, getattr(answer, attr))
    return body


def summary_columns() -> list[tuple[str, Any]]:
    """``(column, Arrow type)`` of the risk-summary columns of the Arrow answer: ``summary_<field>``
    for every field of ``RISK_ARROW_SCHEMA`` but ``symbol`` (float64, ``vol_alert`` bool)."""
    from kronos_core.eval.risk import RISK_ARROW_SCHEMA

    return [(f"summary_{f.name}", f.type) for f in RISK_ARROW_SCHEMA if f.name != "symbol"]


def _summary_arrays(out: ForecastAnswer, h: int) -> dict[str, Any]:
    """The summary columns: each symbol's summary repeated on its ``h`` rows, null where the
    symbol has none (a summary that could not be computed, e.g. non-positive prices)."""
    import pyarrow as pa

    sums = out.summaries if len(out.summaries) == len(out.symbols) else [None] * len(out.symbols)
    cols = {}
    for name, typ in summary_columns():
        key = name.removeprefix("summary_")
        cols[name] = pa.array([None if s is None else s[key] for s in sums for _ in range(h)], typ)
    return cols


def answer_to_arrow(out: ForecastAnswer) -> bytes:
    """Long format: one row per (symbol, step). Columns: symbol, step, timestamp, the six
    mean columns, then ``<feature>_q<level>`` per quantile (level as in ``quantile_label``),
    then with ``summary`` the ``summary_<field>`` columns (``summary_columns``; per symbol,
    the same on each of its rows, null when it has no summary). Every request-level field of the
    answer (model, calibrated, calibration_state, request_id, errors, timing) is JSON in the schema
    metadata (``kronos.<name>``), and each series' inputs (``{symbol, history_length, last_close,
    last_timestamp, warnings}``: the per-symbol fields declared ``arrow_input``) in
    ``kronos.inputs``."""
    import orjson
    import pyarrow as pa

    n = len(out.symbols)
    h = len(out.timestamps[0]) if n else 0
    sym_idx = np.repeat(np.arange(n, dtype=np.int32), h)
    cols: dict[str, pa.Array] = {
        "symbol": pa.DictionaryArray.from_arrays(
            pa.array(sym_idx, pa.int32()), pa.array(out.symbols, pa.string())
        ),
        "step": pa.array(np.tile(np.arange(1, h + 1, dtype=np.int32), n)),
        "timestamp": pa.array(
            np.concatenate(out.timestamps) if n else np.array([], "datetime64[ns]"),
            pa.timestamp("ns"),
        ),
    }
    mean = np.concatenate(out.mean, axis=0) if n else np.zeros((0, 6), np.float32)  # (n*H, 6)
    for k, name in enumerate(FEATURE_NAMES):
        cols[name] = pa.array(np.ascontiguousarray(mean[:, k]), pa.float32())
    # the columns exist even when no symbol succeeded: one schema per request
    if out.quantile_levels:
        nq = len(out.quantile_levels)
        # cast: with levels asked, every forecast has its quantiles
        qs = cast(list[np.ndarray], out.quantiles)
        q = np.concatenate(qs, axis=1) if n else np.zeros((nq, 0, 6), np.float32)  # (Q, n*H, 6)
        for qi, lv in enumerate(out.quantile_levels):
            for k, name in enumerate(FEATURE_NAMES):
                cols[f"{name}_q{quantile_label(lv)}"] = pa.array(
                    np.ascontiguousarray(q[qi, :, k]), pa.float32()
                )
    if out.summary:  # like the quantiles: the columns exist even when no symbol succeeded
        cols.update(_summary_arrays(out, h))
    # request-level fields as JSON in the schema metadata (kronos.<name>); per symbol, the fields
    # that are no columns (symbol, history_length, last_timestamp, last_close, warnings) in
    # kronos.inputs
    meta = {
        f"kronos.{w.name}".encode(): orjson.dumps(_value(out, w, getattr(out, attr)))
        for attr, w in wire_fields(per_symbol=False)
    }
    inputs = [w for w in wire_fields(per_symbol=True) if w[1].arrow_input]
    meta[b"kronos.inputs"] = orjson.dumps([_symbol_json(out, i, inputs) for i in range(n)])
    table = pa.table(cols).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
