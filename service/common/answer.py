"""The forecast answer: one frozen type, ``ForecastAnswer``, from which every form of it derives.

Each field that goes on the wire declares, once, how (``answer_field``): its name and JSON type
in the answer (the OpenAPI schema's ``ForecastResponse`` and ``SymbolForecast`` are built from
these declarations), how its value becomes JSON, and whether the Arrow answer carries it in its
``kronos.inputs`` metadata. ``service.gateway.encode`` writes the JSON body and the Arrow stream
by walking the declarations, so a new field declared here appears in all three forms; the code
that computes it (``service.gateway.core``) is the only other file it touches.

Fields per symbol are columns: lists in request order, one entry per answered symbol
(``per_symbol=True``). Fields without a declaration (``quantile_levels``, ``summary``, the input
histories, ``ledger``) are not on the wire; the encoders and the ledger read them.

Nothing changes an answer once it is built: the dataclass is frozen, and the gateway builds it
in one call after every stage has run (``ForecastPipeline``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_origin

import numpy as np
from pydantic import BaseModel, Field, create_model

from kronos_core.base.options import quantile_label
from service.common.schemas import (
    FEATURE_NAMES,
    CalibrationStateOut,
    Candles,
    DeadlineOut,
    LookbackOut,
    ModelInfo,
    MoveCorrectionOut,
    PriceLimitOut,
    RiskSummaryOut,
    SymbolErrorOut,
    SymbolWarning,
    WallClock,
)

Encoder = Callable[[Any, "ForecastAnswer"], Any]  # (field value, the answer) -> JSON value


@dataclass(frozen=True)
class Wire:
    """How one answer field goes on the wire (see the module docstring)."""

    name: str  # its key in the JSON answer ("" : the attribute's name)
    json_type: Any  # the type the OpenAPI schema gives it
    description: str | None = None
    encode: Encoder | None = None  # None: the value as it is
    required: bool = True  # in the schema; else ``schema_default`` (or an empty list)
    schema_default: Any = None
    omit_none: bool = False  # per symbol: no key at all when the value is None
    per_symbol: bool = False  # a column: one entry per answered symbol
    arrow_input: bool = False  # per symbol: also in the Arrow answer's ``kronos.inputs``


def answer_field(
    json_type: Any,
    description: str | None = None,
    *,
    name: str = "",
    encode: Encoder | None = None,
    required: bool = True,
    schema_default: Any = None,
    omit_none: bool = False,
    per_symbol: bool = False,
    arrow_input: bool = False,
    **dataclass_field: Any,
) -> Any:
    """A dataclass field of ``ForecastAnswer`` with its ``Wire`` declaration."""
    wire = Wire(
        name,
        json_type,
        description,
        encode,
        required,
        schema_default,
        omit_none,
        per_symbol,
        arrow_input,
    )
    return field(metadata={"wire": wire}, **dataclass_field)


def wire_fields(per_symbol: bool | None = None) -> list[tuple[str, Wire]]:
    """``(attribute, Wire)`` of the answer's wire fields in declaration order (JSON key order);
    ``per_symbol`` True or False: only those of that kind."""
    out = []
    for f in dataclasses.fields(ForecastAnswer):
        wire = f.metadata.get("wire")
        if wire is not None and (per_symbol is None or wire.per_symbol == per_symbol):
            out.append((f.name, dataclasses.replace(wire, name=wire.name or f.name)))
    return out


def iso_times(ts: np.ndarray | Sequence[np.datetime64]) -> list[str]:
    """Times as ISO text to the second (the answer's wall clocks)."""
    return list(np.datetime_as_string(ts, unit="s"))


def candles(a: np.ndarray) -> dict[str, np.ndarray]:
    """(H, 6) -> one contiguous float32 column per feature (orjson writes numpy natively)."""
    return {name: np.ascontiguousarray(a[:, k]) for k, name in enumerate(FEATURE_NAMES)}


def _one_time(v: np.datetime64, _answer: ForecastAnswer) -> str:
    return iso_times([v])[0]


def _times(v: np.ndarray, _answer: ForecastAnswer) -> list[str]:
    return iso_times(v)


def _candles(v: np.ndarray, _answer: ForecastAnswer) -> dict[str, np.ndarray]:
    return candles(v)


def _quantiles(
    q: np.ndarray | None, answer: ForecastAnswer
) -> dict[str, dict[str, np.ndarray]] | None:
    """(Q, H, 6) -> {level as text: candles} (``quantile_label``)."""
    if q is None:
        return None
    return {quantile_label(lv): candles(q[k]) for k, lv in enumerate(answer.quantile_levels)}


def _paths(p: np.ndarray | None, _answer: ForecastAnswer) -> list[dict[str, np.ndarray]] | None:
    """(S, H, 6) -> one candles object per path."""
    return None if p is None else [candles(p[s]) for s in range(p.shape[0])]


@dataclass(frozen=True)
class LedgerInputs:
    """What the forecast ledger records beside the answer (``service.gateway.record``): where the
    series came from, when the answer was made, and the paths when the ledger keeps them (also
    when the answer does not return them)."""

    source: str  # "store" or "inline"
    frequency: str | None
    recorded_at: np.datetime64  # UTC, ns
    paths: list[np.ndarray | None]  # (S, H, 6) per symbol, or None each (paths not recorded)


@dataclass(frozen=True, kw_only=True)
class ForecastAnswer:
    """One answered forecast request. Per-symbol fields are lists in request order."""

    model: dict = answer_field(ModelInfo)
    calibrated: bool = answer_field(
        bool,
        "quantiles corrected by the calibration named in model.calibration",
        required=False,
        schema_default=False,
        default=False,
    )
    calibration_state: dict | None = answer_field(
        CalibrationStateOut | None,
        "with an adaptive (aci) calibration: the state whose corrections this answer used",
        required=False,
        default=None,
    )
    request_id: str | None = answer_field(
        str | None,
        "the request's id (its rows in the forecast ledger carry it)",
        required=False,
        default=None,
    )
    lookback: dict | None = answer_field(
        LookbackOut | None,
        "the lookback read and where it came from",
        required=False,
        default=None,
    )  # {value, source, note}: kronos_core.base.lookback.Lookback.as_dict()
    deadline: dict | None = answer_field(
        DeadlineOut | None,
        "the deadline it ran under (the client's, the default, or one the service lengthened to "
        "fit its plan) and its planned seconds",
        required=False,
        default=None,
    )  # service.gateway.deadline.Deadline.as_dict()
    store_version: int | None = answer_field(
        int | None,
        "the store version every stored window of this answer was read from (one per request; "
        "0: an unversioned store); null for inline series",
        required=False,
        default=None,
    )
    as_of: np.datetime64 | None = answer_field(
        WallClock | None,
        "the portfolio's as-of (wall clock): the latest time that most of its series' last "
        "candles reach; a store symbol behind it by more than a session, or behind the "
        "request's as_of, carries a `stale` warning; null when no series was usable",
        encode=_one_time,
        required=False,
        default=None,
    )
    move_correction: dict | None = answer_field(
        MoveCorrectionOut | None,
        "the model's move correction for this horizon (model.moves), and whether the paths got "
        "it; null: the model has none",
        required=False,
        default=None,
    )
    # ---- per symbol: the answer's "forecasts", one object per answered symbol
    symbols: list[str] = answer_field(str, name="symbol", per_symbol=True, arrow_input=True)
    history_length: list[int] = answer_field(
        int,
        "candles of history this forecast was made from",
        per_symbol=True,
        arrow_input=True,
        default_factory=list,
    )
    last_timestamp: list[np.datetime64] = answer_field(
        WallClock,
        "the last input candle's time (wall clock)",
        encode=_one_time,
        per_symbol=True,
        arrow_input=True,
        default_factory=list,
    )
    last_close: list[float] = answer_field(
        float,
        "the last input candle's close (the base of a forecast's change)",
        per_symbol=True,
        arrow_input=True,
        default_factory=list,
    )
    warnings: list[list[dict]] = answer_field(
        list[SymbolWarning],
        "short_history, history_cut, missing_sessions, stale, uncalibrated: the forecast is made "
        "anyway",
        required=False,
        per_symbol=True,
        arrow_input=True,
        default_factory=list,
    )
    price_limit: list[dict | None] = answer_field(
        PriceLimitOut | None,
        "the daily price-limit rule its paths were held to (applied: false when the request or "
        "the service turned limits off); null: its market has none (US, FX, crypto, an index)",
        required=False,
        per_symbol=True,
        arrow_input=True,
        default_factory=list,
    )
    # (H,) each
    timestamps: list[np.ndarray] = answer_field(list[WallClock], encode=_times, per_symbol=True)
    mean: list[np.ndarray] = answer_field(Candles, encode=_candles, per_symbol=True)  # (H, 6) each
    quantiles: list[np.ndarray | None] = answer_field(
        dict[str, Candles] | None,
        "level (as text) -> candles",
        encode=_quantiles,
        required=False,
        omit_none=True,
        per_symbol=True,
    )  # (Q, H, 6) each
    paths: list[np.ndarray | None] = answer_field(
        list[Candles] | None,
        encode=_paths,
        required=False,
        omit_none=True,
        per_symbol=True,
        default_factory=list,
    )  # (S, H, 6) each, when asked
    summaries: list[dict | None] = answer_field(
        RiskSummaryOut | None,
        "with summary: true",
        name="summary",
        required=False,
        omit_none=True,
        per_symbol=True,
        default_factory=list,
    )
    # ---- after the forecasts
    errors: list[dict] = answer_field(list[SymbolErrorOut])
    timing: dict[str, float] = answer_field(dict[str, float])
    # ---- not on the wire
    # the request's levels (the quantiles' keys and Arrow columns)
    quantile_levels: tuple[float, ...] = ()
    # the request asked for summaries (the Arrow answer then has summary_* columns)
    summary: bool = False
    # (L, 6) input candles per symbol
    histories: list[np.ndarray] = field(default_factory=list, repr=False)
    # (L,) their times
    history_timestamps: list[np.ndarray] = field(default_factory=list, repr=False)
    ledger: LedgerInputs | None = field(default=None, repr=False)  # None: not recorded

    def per_symbol(self, attribute: str, i: int) -> Any:
        """Entry ``i`` of a per-symbol column; None where the column is shorter (no summaries
        asked)."""
        column = getattr(self, attribute)
        return column[i] if i < len(column) else None


def _schema_model(
    name: str, fields: list[tuple[str, Wire]], extra: dict[str, Any]
) -> type[BaseModel]:
    spec: dict[str, Any] = {}
    for _attr, w in fields:
        if w.required:
            spec[w.name] = (w.json_type, Field(..., description=w.description))
        elif w.schema_default is None and get_origin(w.json_type) is list:
            spec[w.name] = (w.json_type, Field(default_factory=list, description=w.description))
        else:
            spec[w.name] = (w.json_type, Field(w.schema_default, description=w.description))
    spec.update(extra)
    # no docstring: the schema is what the hand-written models gave
    model = create_model(name, **spec)
    model.__module__ = __name__
    return model


def _response_models() -> tuple[type[BaseModel], type[BaseModel]]:
    """(SymbolForecast, ForecastResponse): the OpenAPI schema of the answer, from its
    declarations."""
    symbol = _schema_model("SymbolForecast", wire_fields(per_symbol=True), {})
    top = wire_fields(per_symbol=False)
    first_after = next(i for i, (attr, _) in enumerate(top) if attr == "errors")
    forecasts = ("forecasts", Wire("forecasts", list[symbol]))  # type: ignore[valid-type]
    ordered = [*top[:first_after], forecasts, *top[first_after:]]
    response = _schema_model("ForecastResponse", ordered, {})
    return symbol, response


SymbolForecast, ForecastResponse = _response_models()
