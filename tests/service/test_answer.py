"""The one answer type (``service.common.answer.ForecastAnswer``): the JSON body, the Arrow
stream's metadata and the OpenAPI schema all come from its field declarations, and an answer
cannot be changed once built."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pytest

from service.common.answer import ForecastAnswer, ForecastResponse, SymbolForecast, wire_fields
from service.gateway.encode import answer_to_arrow, answer_to_json

MODEL = {
    "name": "fake", "sha256": "ab" * 32, "model_sha256": "cd" * 32, "tokenizer_sha256": "ef" * 32,
    "bundled": True, "random_weights": True, "max_context": 64, "dtype": "float32",
    "sliding": "exact", "compile": False,
}


def _answer() -> ForecastAnswer:
    ts = pd.date_range("2024-05-01 09:30", periods=3, freq="h").to_numpy()
    mean = np.arange(18, dtype=np.float32).reshape(3, 6)
    return ForecastAnswer(
        model=MODEL, request_id="r1", symbols=["A"], history_length=[10],
        last_timestamp=[ts[0] - np.timedelta64(1, "h")], last_close=[101.5], warnings=[[]],
        timestamps=[ts],
        mean=[mean], quantiles=[np.stack([mean, mean + 1])], paths=[mean[None]], summaries=[None],
        errors=[], timing={"total_ms": 1.0}, quantile_levels=(0.1, 0.9),
    )


def test_the_schema_has_exactly_the_declared_fields():
    top = [w.name for _, w in wire_fields(per_symbol=False)]
    at = top.index("errors")  # the forecasts come just before the errors
    assert list(ForecastResponse.model_fields) == [*top[:at], "forecasts", *top[at:]]
    assert list(SymbolForecast.model_fields) == [w.name for _, w in wire_fields(per_symbol=True)]


def test_json_and_arrow_carry_every_declared_field():
    answer = _answer()
    body = orjson.loads(orjson.dumps(answer_to_json(answer), option=orjson.OPT_SERIALIZE_NUMPY))
    ForecastResponse.model_validate(body)  # the schema accepts what the encoder writes
    assert set(body) == set(ForecastResponse.model_fields)
    # summary is None here
    omitted = {w.name for _, w in wire_fields(per_symbol=True) if w.omit_none}
    assert set(body["forecasts"][0]) == set(SymbolForecast.model_fields) - {"summary"}
    assert "summary" in omitted
    meta = pa.ipc.open_stream(answer_to_arrow(answer)).read_all().schema.metadata
    for _, w in wire_fields(per_symbol=False):
        assert orjson.loads(meta[f"kronos.{w.name}".encode()]) == body[w.name]
    inputs = orjson.loads(meta[b"kronos.inputs"])
    assert list(inputs[0]) == [w.name for _, w in wire_fields(per_symbol=True) if w.arrow_input]
    assert inputs[0] == {k: body["forecasts"][0][k] for k in inputs[0]}


def test_an_answer_cannot_be_changed_once_built():
    answer = _answer()
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.paths = [None]  # type: ignore[misc]
