"""Request and response models of the REST API, with every limit stated in the schema.

Limits here are the hard ceilings of the API; a deployment may lower the number of
symbols per request (``KRONOS_MAX_SYMBOLS``), which the gateway enforces with a 422
that names the field as well.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from kronos_core.base.errors import REQUEST_ERROR_CODES, SYMBOL_ERROR_CODES, ErrorCode, WarningCode
from kronos_core.base.options import REFERENCE_TEMPERATURE, REFERENCE_TOP_P

MAX_SYMBOLS = 10_000  # symbols or inline series in one request
MAX_HORIZON = 512  # candles forecast per series
MAX_LOOKBACK = 4096  # candles of history per series
MAX_SAMPLES = 100  # sample paths per series
MAX_QUANTILES = 19
MAX_SERIES_LENGTH = 100_000  # candles in one inline series
# the largest integer a double holds exactly (every JSON reader reads it)
MAX_JSON_INTEGER = 2**53 - 1
MAX_RETURNED_VALUES = 5_000_000  # sample_count x horizon x symbols of return_paths

FEATURE_NAMES = ("open", "high", "low", "close", "volume", "amount")


def _column_number(field: str, i: int, v: Any) -> float:
    """One value of the legacy column form: a number, or NaN for null / "NaN" (reported per series
    later)."""
    if v is None:
        return math.nan
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"{field}[{i}] = {v[:32]!r} is not a number") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{field}[{i}] = {str(v)[:32]} is not a number")
    try:
        return float(v)
    except OverflowError:  # an integer beyond the float range
        raise ValueError(f"{field}[{i}] is an integer too large for a float") from None


def columns_to_candles(data: dict) -> dict:
    """The legacy column form (``timestamps``, ``open`` ... ``amount``, equal lengths) as
    candle rows. Kept working for existing clients; the schema documents ``candles`` only."""
    data = dict(data)
    ts = data.pop("timestamps")
    if not isinstance(ts, list):
        raise ValueError("timestamps must be a list")
    cols = []
    if data.get("amount") is not None and data.get("volume") is None:
        raise ValueError("amount given without volume")
    for name in FEATURE_NAMES:
        values = data.pop(name, None)
        if values is None and name in ("volume", "amount"):
            continue
        if not isinstance(values, list):
            raise ValueError(f"{name} must be a list of numbers")
        if len(values) != len(ts):
            raise ValueError(f"{name} has {len(values)} values but timestamps has {len(ts)}")
        cols.append([_column_number(name, i, v) for i, v in enumerate(values)])
    data["candles"] = [[t, *row] for t, *row in zip(ts, *cols, strict=True)]
    return data


def json_number(v: Any, where: str) -> Any:
    """``v`` when it is a JSON number (or None), as the schema says; pydantic's lax mode would
    also read "5" or true as one, and a body the schema refuses must be a 422, not coerced."""
    if isinstance(v, (str, bool)):
        raise ValueError(f"{where} should be a number, not {type(v).__name__}")
    return v


def json_datetime(v: Any, where: str) -> Any:
    """``v`` when it is an ISO 8601 string (or a datetime from Python callers, or None), as the
    schema says; lax mode would read the number 0 as 1970-01-01."""
    if v is not None and not isinstance(v, (str, datetime)):
        raise ValueError(f"{where} should be an ISO 8601 date-time string, not {type(v).__name__}")
    return v


_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def iso_datetime_text(v: Any) -> Any:
    """A query parameter's date-time as ISO 8601 text: lax mode would read the text ``0.5`` as
    half a second after 1970 (a query string holds only text, so ``json_datetime`` cannot tell)."""
    if isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):
        raise ValueError(f"should be an ISO 8601 date-time string, not the number {v.strip()}")
    return v


# the years a date-time parameter may name: the store keeps datetime64[ns] stamps (1677-09-21 to
# 2262-04-11), and whole years inside that range, whatever the time zone, are easy to state
STORE_YEARS = (1678, 2261)
# the same years as the schema's pattern on the text, so that a client or a fuzzer that follows
# the schema never sends a date the service refuses
STORE_YEARS_PATTERN = r"^(16(7[89]|[89][0-9])|1[7-9][0-9]{2}|2[01][0-9]{2}|22[0-5][0-9]|226[01])-"


def storable_datetime(v: datetime | None) -> datetime | None:
    """``v`` when its year is within ``STORE_YEARS``: a date the store cannot hold is the
    caller's error (a 422 naming the range), never a 500 from deep inside a read (issue 52)."""
    if v is not None and not STORE_YEARS[0] <= v.year <= STORE_YEARS[1]:
        raise ValueError(
            f"{v.isoformat()} is outside the dates the store holds: the year must be "
            f"{STORE_YEARS[0]} to {STORE_YEARS[1]}"
        )
    return v


# a date-time query parameter: ISO 8601 text only, within the store's years
QueryDateTime = Annotated[
    datetime, BeforeValidator(iso_datetime_text), AfterValidator(storable_datetime),
    Field(json_schema_extra={"pattern": STORE_YEARS_PATTERN}),
]


# One candle: [timestamp, open, high, low, close] with optional volume, then amount. Rows are
# tuples so that every series is rectangular by construction of the schema. A value may be
# null: JSON has no NaN, so a missing value arrives as null (what pandas' to_json writes); the
# row keeps None there and the gateway reports the series as ``invalid_series`` naming the
# row and column (``close[3] is null``), while the other series are forecast.
CandleValue = Annotated[float, Strict()] | None  # strict: a JSON number, never "1.5" or true
CandleRow = Union[  # noqa: UP007 - three tuple widths, one anyOf in the schema
    tuple[datetime, CandleValue, CandleValue, CandleValue, CandleValue],
    tuple[datetime, CandleValue, CandleValue, CandleValue, CandleValue, CandleValue],
    tuple[datetime, CandleValue, CandleValue, CandleValue, CandleValue, CandleValue, CandleValue],
]


# Response times are the series' own wall clock (what the model's time features see), written
# without a UTC offset: not RFC 3339 ``date-time``, so the schema states the exact shape instead.
WallClock = Annotated[
    str,
    Field(
        pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$",
        description="ISO 8601 wall-clock time of the series' market, no UTC offset "
                    "(YYYY-MM-DDTHH:MM:SS)",
    ),
]


def _exchange_enum(schema: dict) -> None:
    """The schema lists the calendars the server knows (what it accepts), when it has them."""
    try:
        from kronos_core.data.calendars import exchange_names

        names = exchange_names()  # upper-case names the gateway finds and can build
    except ImportError:  # exchange_calendars not installed: every name is then a 422
        return
    target = next((alt for alt in schema.get("anyOf", []) if alt.get("type") == "string"), schema)
    target["enum"] = names


class InlineSeries(BaseModel):
    """Candles the store does not hold: rows ``[timestamp, open, high, low, close, volume?,
    amount?]``, oldest first. No volume: volume = amount = 0; no amount: volume x mean(open, high,
    low, close).

    A series with a null or non-finite value, or whose timestamps are not strictly increasing,
    is reported in the response's ``errors`` (code ``invalid_series``); the others are forecast.
    """

    model_config = ConfigDict(extra="forbid")

    symbol: str = Field(..., min_length=1, max_length=64, description="name used in the response")
    candles: list[CandleRow] = Field(
        ..., min_length=2, max_length=MAX_SERIES_LENGTH,
        description="[timestamp, open, high, low, close] or with volume, or with volume and "
                    "amount; oldest first",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_columns(cls, data: Any) -> Any:
        if isinstance(data, dict) and "candles" not in data and "timestamps" in data:
            return columns_to_candles(data)
        return data

    @field_validator("candles", mode="before")
    @classmethod
    def _json_types(cls, rows: Any) -> Any:
        """Each row's timestamp a string, as the schema says (its values are strict floats)."""
        if isinstance(rows, list):
            for i, row in enumerate(rows):
                if not isinstance(row, (list, tuple)) or not row:
                    continue  # the row type's own validation names it
                if type(row[0]) is not str:
                    json_datetime(row[0], f"candles[{i}][0]")
        return rows

    @field_validator("candles", mode="wrap")
    @classmethod
    def _named_value_errors(cls, rows: Any, handler) -> Any:
        """The rows as validated; a value that is no number, which each of the three row widths
        refuses (pydantic's union noise), is named instead: ``candles[3][4] should be a number``."""
        try:
            return handler(rows)
        except ValidationError:
            for i, row in enumerate(rows if isinstance(rows, list) else []):
                if isinstance(row, (list, tuple)) and 5 <= len(row) <= 7:
                    for k, v in enumerate(row[1:], start=1):
                        json_number(v, f"candles[{i}][{k}]")
            raise


class ForecastRequest(BaseModel):
    """One portfolio forecast: store symbols or inline series, and sampling options."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["symbols"], "not": {"required": ["series"]}},
                {
                    "required": ["series"],
                    "not": {"anyOf": [{"required": ["symbols"]}, {"required": ["as_of"]}]},
                },
            ]
        },
    )

    # exactly one of symbols / series (the oneOf below says so in the schema); neither is nullable
    # there
    symbols: (
        Annotated[list[str], Field(min_length=1, max_length=MAX_SYMBOLS)] | SkipJsonSchema[None]
    ) = Field(
        None, description="symbols read from the store, unique",
        json_schema_extra={"uniqueItems": True},
    )
    series: (
        Annotated[list[InlineSeries], Field(min_length=1, max_length=MAX_SYMBOLS)]
        | SkipJsonSchema[None]
    ) = Field(
        None,
        description="inline candles; a series that fails validation is reported in errors, the "
                    "rest forecast",
    )
    horizon: int = Field(..., ge=1, le=MAX_HORIZON,
                         description="candles to forecast; at most the model's max_context "
                         "(GET /v1/models), else a 422 naming it")
    lookback: int | None = Field(
        None, ge=2, le=MAX_LOOKBACK,
        description="candles of history; default: the loaded calibration's fitted lookback, "
        "else max_context - horizon (no sliding window). Past max_context - horizon the window "
        "slides (model.sliding says how)",
    )
    as_of: datetime | None = Field(
        None,
        description="read the store up to this time (inclusive); naive = each symbol's wall "
                    f"clock; years {STORE_YEARS[0]} to {STORE_YEARS[1]} (the store's range), "
                    "else a 422",
        json_schema_extra={"pattern": STORE_YEARS_PATTERN},
    )
    exclude_stale: StrictBool = Field(
        False,
        description="leave out symbols whose last candle is behind the request's as_of, or "
                    "behind the portfolio's as-of by more than a session, and list them in "
                    "errors with code stale; false: they are forecast with a stale warning",
    )
    frequency: str | None = Field(
        None, pattern=r"^[A-Za-z0-9]{1,16}$",
        description="store frequency folder (e.g. 1h) when it holds several",
    )
    exchange: str | None = Field(
        None, pattern=r"^([A-Za-z0-9_-]{2,16}|24/[57])$", json_schema_extra=_exchange_enum,
        description="venue whose calendar gives the future timestamps (ISO MIC: XNYS, XNAS, XSHG, "
                    "XHKG, ...; 24/7 for crypto, 24/5 for spot FX), "
        "holidays included; default: each store symbol's metadata 'exchange', else the "
        "'sessions' the store inferred from its whole history (24/7), else sessions learned "
        "from the history read",
    )
    sample_count: int | None = Field(
        None, ge=1, le=MAX_SAMPLES,
        description="sample paths per series; default: the model's (GET /v1/models, sampling)")
    temperature: float | None = Field(
        None, gt=0, le=10, description="softmax temperature; default: the model's")
    top_k: int = Field(0, ge=0, le=4096, description="0: off")
    top_p: float | None = Field(
        None, gt=0, le=1, description="nucleus mass (1: off); default: the model's")
    # at most 2^53 - 1: the largest integer every JSON reader keeps exact (I-JSON, RFC 7493); above
    # it a client's or a fuzzer's doubles round, and a bound they think they meet is missed
    seed: int | None = Field(None, ge=0, le=MAX_JSON_INTEGER, description="same seed, same answer")
    quantiles: list[Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=list, max_length=MAX_QUANTILES, json_schema_extra={"uniqueItems": True},
        description="levels strictly between 0 and 1, unique",
    )
    return_paths: StrictBool = Field(False, description="include every sample path")
    summary: StrictBool = Field(
        False,
        description="add a per-symbol risk summary from the sample paths: expected return, P(up), "
        "volatility, 95% VaR and ES of the horizon return, vol_alert (see docs/evaluation.md; per "
        "symbol only, no portfolio VaR: paths of different symbols are independent)",
    )
    vol_alert_factor: float = Field(
        2.0, gt=0, le=100,
        description="summary.vol_alert: forecast volatility > this x the recent realised one",
    )
    repair: StrictBool = Field(
        False,
        description="make forecast candles consistent: volume, amount >= 0; high >= max(open, "
                    "close); "
        "low <= min(open, close). Off by default: results then equal the reference model's",
    )
    price_limits: StrictBool = Field(
        True,
        description="hold each sample path of a symbol with a daily price limit (Shanghai, "
        "Shenzhen, Beijing: its board, ST status and the step's date) inside the limit of the "
        "previous step's close, so mean, quantiles and summary come from moves the exchange "
        "allows; each forecast's price_limit names the rule. false: paths as sampled",
    )
    move_correction: StrictBool = Field(
        True,
        description="apply the model's fitted move correction (GET /v1/models, moves): each "
        "step's path centre shrunk toward the last close and the spread sized so forecast moves "
        "match realised ones, before the price limits; the answer's move_correction names the "
        "values. false: the model's paths as sampled",
    )
    record: StrictBool = Field(
        True,
        description="append the answered forecasts to the forecast ledger, to be scored when their "
                    "truth "
        "arrives (`GET /v1/accuracy`); false: not recorded. Nothing is recorded when the service's "
        "ledger is off",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_null_source(cls, data: Any) -> Any:
        """The schema says symbols / series are arrays: an explicit null is refused, not read as
        absent."""
        if isinstance(data, dict):
            for name in ("symbols", "series"):
                if name in data and data[name] is None:
                    raise ValueError(f"{name} is null; leave it out or give an array")
        return data

    @field_validator("horizon", "lookback", "sample_count", "temperature", "top_k", "top_p", "seed",
                     "vol_alert_factor", mode="before")
    @classmethod
    def _json_numbers(cls, v: Any, info) -> Any:
        return json_number(v, info.field_name)

    @field_validator("quantiles", mode="before")
    @classmethod
    def _json_number_items(cls, v: Any) -> Any:
        if isinstance(v, list):
            for i, q in enumerate(v):
                json_number(q, f"quantiles[{i}]")
        return v

    @field_validator("as_of", mode="before")
    @classmethod
    def _json_datetime(cls, v: Any) -> Any:
        return json_datetime(v, "as_of")

    @field_validator("as_of")
    @classmethod
    def _storable(cls, v: datetime | None) -> datetime | None:
        return storable_datetime(v)

    @field_validator("symbols")
    @classmethod
    def _unique_symbols(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        seen: set[str] = set()
        dups = [s for s in v if s in seen or seen.add(s)]  # type: ignore[func-returns-value]
        if dups:
            raise ValueError(f"symbols must be unique; repeated: {sorted(set(dups))[:5]}")
        return v

    @field_validator("quantiles")
    @classmethod
    def _check_quantiles(cls, v: list[float]) -> list[float]:
        for i, q in enumerate(v):
            if not (0.0 < q < 1.0):
                raise ValueError(f"quantiles[{i}] = {q} must be strictly between 0 and 1")
        if len(set(v)) != len(v):
            raise ValueError("quantiles must be unique")
        return sorted(v)

    @model_validator(mode="after")
    def _one_source(self) -> ForecastRequest:
        if (self.symbols is None) == (self.series is None):
            raise ValueError("give exactly one of symbols or series")
        if self.series is not None:
            if self.as_of is not None:
                raise ValueError("as_of applies to store symbols only; cut inline series yourself")
        problem = self.too_many_paths()
        if problem:
            raise ValueError(problem)
        return self

    def too_many_paths(self) -> str | None:
        """Why the paths asked for are too many to return, or None (an unset sample_count is
        checked once the model's default fills it)."""
        if (
            self.return_paths and self.sample_count is not None
            and self.sample_count * self.horizon * self.n_series > MAX_RETURNED_VALUES
        ):
            return ("return_paths: sample_count x horizon x symbols exceeds 5,000,000 values; "
                    "ask fewer")
        return None

    def with_sampling_defaults(self, sampling: dict[str, Any] | None) -> ForecastRequest:
        """The request with each sampling setting it leaves unset taken from the model's
        (``ModelInfo.sampling``; the reference's when the model has none)."""
        defaults = sampling or {}
        updates = {
            name: defaults.get(name, fallback)
            for name, fallback in (("sample_count", 1), ("temperature", REFERENCE_TEMPERATURE),
                                   ("top_p", REFERENCE_TOP_P))
            if getattr(self, name) is None
        }
        return self.model_copy(update=updates) if updates else self

    @property
    def paths(self) -> int:
        """Sample paths per series once the model's defaults are filled in (1 before)."""
        return self.sample_count or 1

    @property
    def n_series(self) -> int:
        return len(self.symbols or self.series or [])


class Candles(BaseModel):
    open: list[float]
    high: list[float]
    low: list[float]
    close: list[float]
    volume: list[float]
    amount: list[float]


class SymbolWarning(BaseModel):
    """The forecast was made, but its input deserves a look."""

    code: WarningCode
    message: str


class RiskSummaryOut(BaseModel):
    """Per-symbol risk figures from the sample paths (kronos_core.eval.risk; returns as fractions).
    R is the close at the last step over the last close, minus 1, one value per path. Sign of
    var_95 and es_95: positive is a loss, negative a gain (even the worst 5% of paths gain)."""

    expected_return: float = Field(
        ..., description="mean simple return of the close to the last step"
    )
    p_up: float = Field(..., description="share of paths ending above the last close; it moves "
                        "in steps of 1/sample_paths (1.0 from 20 paths: all 20 ended up, not "
                        "certainty)")
    volatility: float = Field(..., description="std of one-bar log returns along the paths")
    horizon_volatility: float = Field(..., description="std of the horizon log return")
    var_95: float = Field(..., description="95% value-at-risk of the horizon return: minus the "
                          "5% quantile of R. Positive: a loss (0.03: the worst 5% of paths lose "
                          "3% or more); negative: a gain (-0.01: 95% of paths gain more than 1%)")
    es_95: float = Field(..., description="95% expected shortfall: minus the mean of R over the "
                         "paths at or below its 5% quantile; positive: a loss, negative: a gain")
    realized_volatility: float = Field(
        ..., description="std of the last 20 one-bar log returns of the history"
    )
    vol_alert: bool = Field(..., description="volatility > vol_alert_factor x realized_volatility")
    sample_paths: int = Field(..., description="sample paths the figures come from (the request's "
                              "sample_count): p_up's resolution is 1/sample_paths")


# exactly the codes a forecast response's ``errors`` can hold (tests/service/test_error_codes.py);
# the type checker cannot evaluate a Literal built at run time, so it sees the codes (and those
# below) as text
if TYPE_CHECKING:
    SymbolErrorCode = str
else:
    SymbolErrorCode = Literal[tuple(c.value for c in SYMBOL_ERROR_CODES)]


class SymbolErrorOut(BaseModel):
    symbol: str
    code: SymbolErrorCode = Field(
        ..., description="machine-readable reason; kronos_core.base.errors.ErrorCode"
    )
    message: str = Field(..., description="for people: names the cause and the fix; do not parse")


# the codes of a whole request's failure that carry a body with ``detail`` text and ``code`` (a
# 422 has FastAPI's shape: ``UnprocessableOut``)
UNPROCESSABLE_CODES = (ErrorCode.INVALID_REQUEST, ErrorCode.DEADLINE_UNREACHABLE)
if TYPE_CHECKING:
    RequestErrorCode = str
else:
    RequestErrorCode = Literal[
        tuple(c.value for c in REQUEST_ERROR_CODES if c not in UNPROCESSABLE_CODES)
    ]


class RequestErrorOut(BaseModel):
    """The body of a 413, 503 or 504: the request as a whole got no answer."""

    detail: str
    code: RequestErrorCode = Field(
        ...,
        description="unauthorized (401), forbidden (403), too_large "
        "(413), rate_limited (429), overloaded or shutting_down (503: see Retry-After), "
        "deadline_exceeded (504)",
    )


class ValidationIssue(BaseModel):
    """One entry of a 422's ``detail`` (FastAPI's validation-error shape)."""

    loc: list[str | int] = Field(..., description="\"body\" or \"header\", then the field, "
                                 "then list indexes as numbers")
    msg: str
    type: str


class DeadlineFitsOut(BaseModel):
    """What the plan puts within a refused request's time, one change at a time, the rest as
    asked (0: no such request fits)."""

    symbols: int = Field(..., description="the most series (the first ones of the request)")
    sample_count: int = Field(..., description="the most sample paths")
    horizon: int = Field(..., description="the most horizon steps")
    timeout_s: int = Field(..., description="the deadline the request as asked would need")


class DeadlinePlanOut(BaseModel):
    """Why a request was refused before any work (``deadline_unreachable``)."""

    planned_s: float = Field(..., description="the request's planned seconds (a quiet machine's "
                             "estimate: its series, paths and steps on the replicas live)")
    deadline_s: float = Field(..., description="the deadline it is past: the request's, or the "
                              "longest the service gives")
    deadline_source: Literal["request", "default", "extended"] = Field(
        ..., description="request: X-Kronos-Timeout-S; default: KRONOS_REQUEST_TIMEOUT_S")
    remaining_s: float = Field(..., description="the seconds the request had left when planned")
    margin: float = Field(..., description="refused only when planned_s > margin x remaining_s "
                          "(KRONOS_DEADLINE_MARGIN)")
    longest_timeout_s: float = Field(..., description="the longest deadline this service gives "
                                     "(KRONOS_MAX_REQUEST_TIMEOUT_S, else "
                                     "KRONOS_REQUEST_TIMEOUT_S)")
    series: int = Field(..., description="usable series planned")
    sample_count: int
    horizon: int
    lanes: int = Field(..., description="step loops the series were planned on (the replicas "
                       "live x their step loops)")
    device: str = Field(..., description="the device whose speed the plan used (cpu, h100, ...)")
    fits: DeadlineFitsOut


class UnprocessableOut(BaseModel):
    """A 422: FastAPI's validation-error shape, ``detail[].loc`` naming the field. A request
    planned past its deadline, refused before any work, also carries ``code``
    (``deadline_unreachable``) and its ``plan``."""

    detail: list[ValidationIssue]
    code: Literal[ErrorCode.DEADLINE_UNREACHABLE] | None = Field(
        None, description="deadline_unreachable: planned past its deadline (the plan says by how "
        "much and what would fit); absent for other 422s")
    plan: DeadlinePlanOut | None = Field(None, description="with deadline_unreachable")


class CalibrationInfo(BaseModel):
    """A quantile calibration (``kronos calibrate``: conformalized quantile regression, or ACI on
    its scores)."""

    model_name: str | None = Field(
        None, description="name of the model the calibration was fitted for"
    )
    model_sha256: str = Field(
        ..., description="identity (sha256) of the model it was fitted for; equals model.sha256"
    )
    method: str = Field(
        ..., description="cqr, cqr-r or aci (a file fitted with select says which it chose)"
    )
    levels: list[float] = Field(..., description="central interval levels it was fitted at")
    horizon: int = Field(..., description="longest horizon it covers")
    features: list[str]


class SamplingInfo(BaseModel):
    """A model's sampling defaults (``kronos_core.base.options.SamplingDefaults``)."""

    temperature: float
    top_p: float
    sample_count: int
    point: str = Field(..., description="the point forecast of the paths: mean or median")
    source: str = Field(..., description="where they come from: the model's kronos.json, or the "
                        "reference's defaults")


class PriceLimitsInfo(BaseModel):
    """The daily price-limit feature (``kronos_core.base.price_limits``, docs/price-limits.md)."""

    enabled: bool = Field(..., description="paths are held inside the limits unless a request "
                          "says price_limits: false (KRONOS_PRICE_LIMITS)")
    exchanges: list[str] = Field(..., description="exchanges whose symbols have a rule")
    rules: str = Field(..., description="the rules in short")


class MovesInfo(BaseModel):
    """A model's fitted move correction (``kronos_core.base.moves``, its kronos.json 'moves')."""

    lambda_: list[float] = Field(..., alias="lambda", description="per fitted step, the share "
                                 "of the model's mean move kept (0: the last close is the centre)")
    kappa: list[float] = Field(..., description="per fitted step, the scale of the paths' spread "
                               "about their centre")
    windows: int | None = Field(None, description="training-period windows it was fitted on")
    fitted_on: str | None = Field(None, description="which windows")
    fitted_at: str | None = Field(None, description="when (UTC)")
    source: str = Field(..., description="where it came from: the model's kronos.json")

    model_config = {"populate_by_name": True}


class MoveCorrectionOut(BaseModel):
    """The move correction an answer's paths got (the model's, for this horizon)."""

    applied: bool = Field(..., description="false: the request said move_correction: false, the "
                          "paths are as sampled")
    lambda_: list[float] = Field(..., alias="lambda", description="per forecast step (steps past "
                                 "the fitted ones take the last fitted step's)")
    kappa: list[float] = Field(..., description="per forecast step")
    source: str

    model_config = {"populate_by_name": True}


class PriceLimitOut(BaseModel):
    """The daily price-limit rule a forecast's paths were held to."""

    rule: str = Field(..., description="the rule in words, with the band of each part of the "
                      "horizon, e.g. 'main board ±10%, ST status unknown'")
    board: str = Field(..., description="main, star, chinext or bse")
    special_treatment: bool | None = Field(
        ..., description="ST / *ST: from the store's metadata; null: not known (the rule "
        "without it is used)")
    listed: str | None = Field(None, description="first trading day, when the metadata has it")
    source: str = Field(..., description="where the rule came from: metadata, or the code "
                        "on its exchange")
    applied: bool = Field(..., description="false: the request or the service turned limits "
                          "off, the paths are as sampled")
    step_limits: list[float | None] = Field(
        ..., description="per forecast step, the fraction of the previous close it may move "
        "(null: no limit, a new listing's first days)")


class ModelInfo(BaseModel):
    """The model that answered: its identity (pin and audit by ``sha256``) and engine options."""

    name: str = Field(..., description="alias, bundle name or checkpoint folder name")
    sha256: str = Field(
        ..., description="SHA-256 over the model's then the tokenizer's model.safetensors"
    )
    model_sha256: str = Field(..., description="SHA-256 of the predictor's model.safetensors")
    tokenizer_sha256: str = Field(..., description="SHA-256 of the tokenizer's model.safetensors")
    revision: str | None = Field(
        None, description="Hub commit the weights came from, when from the Hub"
    )
    bundled: bool = Field(..., description="shipped inside the package")
    random_weights: bool = Field(..., description="untrained weights: forecasts are not meaningful")
    max_context: int
    dtype: str = Field(..., description="engine precision: float32, bfloat16 or float16")
    sliding: str = Field(..., description="exact, rolling or recompute")
    compile: bool
    note: str | None = None
    calibration: CalibrationInfo | None = Field(
        None,
        description="the calibration the replicas apply (KRONOS_CALIBRATION), with the model it "
                    "was fitted for",
    )
    sampling: SamplingInfo | None = Field(
        None, description="the sampling settings a request that names none gets (the model's "
        "kronos.json, chosen on validation windows; else the reference's)")
    price_limits: PriceLimitsInfo | None = Field(
        None, description="whether sample paths are held inside the exchanges' daily price "
        "limits")
    moves: MovesInfo | None = Field(
        None, description="the move correction the model's paths get unless a request says "
        "move_correction: false (its kronos.json, fitted by kronos tune-moves); null: none")


class CalibrationStateOut(BaseModel):
    """The adaptive calibration state (method aci, updated online from scored forecasts) an answer
    used."""

    method: str = Field(..., description="aci")
    version: int = Field(
        ..., ge=0,
        description="online updates applied since the calibration file (0: the file's own state)",
    )
    hash: str = Field(..., description="hash of the state's corrections")
    updated_at: str | None = Field(
        None, description="UTC time of its last update (ISO 8601); null: never updated"
    )


class LookbackOut(BaseModel):
    """The lookback the answer read (``kronos_core.base.lookback.choose_lookback``) and why."""

    value: int = Field(..., description="candles of history asked of each series (each one's "
                       "own: history_length)")
    source: Literal["request", "calibration", "default"] = Field(
        ..., description="request: the request's lookback; calibration: none asked, the loaded "
        "calibration's fitted lookback (so its corrections apply); default: none asked, "
        "max_context - horizon")
    note: str = Field(..., description="the same in words")


class DeadlineOut(BaseModel):
    """The deadline the request ran under and its planned time (``service.gateway.deadline``)."""

    seconds: float = Field(..., description="the deadline, seconds from the request's arrival")
    source: Literal["request", "default", "extended"] = Field(
        ..., description="request: the X-Kronos-Timeout-S header; default: "
        "KRONOS_REQUEST_TIMEOUT_S; extended: the service gave a request planned past its default "
        "deadline a longer one (up to KRONOS_MAX_REQUEST_TIMEOUT_S)")
    planned_s: float | None = Field(
        ..., description="the request's planned seconds (its series, paths and steps on the "
        "replicas live; a quiet machine's estimate); null: not planned (the check is off, or the "
        "replicas reported no speed)")
    note: str = Field(..., description="why it was extended, in words; empty otherwise")


class AccuracyFigures(BaseModel):
    """Scores of the forecast steps whose truth arrived (kronos_core.ledger), over one span."""

    scored: int = Field(..., ge=0, description="forecast steps scored (symbol x step)")
    coverage: dict[str, float | None] = Field(
        default_factory=dict,
        description="central level (as text, e.g. '0.8') -> share of scored steps whose "
        "truth fell inside that band",
    )
    crps: float | None = Field(
        None, description="mean CRPS of the close, from the quantiles (price units)"
    )
    mae: float | None = Field(
        None, description="mean absolute error of the mean close (price units)"
    )
    direction_hit: float | None = Field(
        None,
        description="share of steps whose mean moved the way the close did "
        "(a step with no move on either side counts half)",
    )


class AccuracyResponse(BaseModel):
    """``GET /v1/accuracy``: live accuracy of the recorded forecasts."""

    model: str | None = Field(None, description="model sha256 filter (null: every model)")
    symbol: str | None = None
    since: str | None = Field(
        None, description="only forecasts made at or after this time (ISO 8601)"
    )
    horizon_step: int | None = Field(
        None, description="only this step (1 = the first forecast candle)"
    )
    window_steps: int = Field(
        ..., description="the rolling window: the latest this many scored steps (by truth time)"
    )
    rolling: AccuracyFigures = Field(..., description="forecasts made within the rolling window")
    all_time: AccuracyFigures = Field(
        ..., description="every recorded forecast (since the retention cut)"
    )
    last_scored: str | None = Field(
        None,
        description="UTC time of this gateway's last scoring pass that scored "
        "something (null: none yet, or another gateway ran them)",
    )
    detail: str = Field("", description="why nothing is reported, e.g. the ledger is off")


class CandleSpan(BaseModel):
    """Stored candles, oldest first: their wall-clock times and one list per feature."""

    timestamps: list[WallClock]
    candles: Candles


class CandlesResponse(BaseModel):
    """``GET /v1/candles``: what the store holds around a forecast's start (the forecast
    explorer draws it: the history under the fan, and after ``as_of`` the actual candles)."""

    symbol: str
    history: CandleSpan = Field(
        ..., description="the last `before` candles at or before as_of (the latest without it)"
    )
    after: CandleSpan = Field(
        ..., description="up to `after` candles stored after as_of (empty without as_of)"
    )


class SymbolsPage(BaseModel):
    symbols: list[str]
    total: int
    limit: int
    offset: int
    store_version: int | None = Field(
        None, description="the store version listed (0: an unversioned store, listed afresh)"
    )


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class Readiness(BaseModel):
    ready: bool
    replicas_ready: int
    replicas_target: int
    detail: str = ""


ARROW_STREAM = "application/vnd.apache.arrow.stream"
