"""The one list of machine-readable error and warning codes.

The store raises errors carrying these codes, the service's gateway and replicas report
them, the REST schema lists them (``SymbolErrorOut.code``, ``SymbolWarning.code``), and the
``kronos_errors_total{code}`` metric counts them. Code branches on these values, never on
the wording of a message.

``ErrorCode`` is a ``str`` enum (Python 3.10 has no ``StrEnum``): a member compares equal to
its value, serialises as it in JSON, and reads well in logs.
"""

from __future__ import annotations

from enum import Enum


class ErrorCode(str, Enum):
    """Why a symbol (or a whole request) got no forecast."""

    # -- per symbol: the ``errors`` list of a forecast response
    INVALID_SYMBOL = "invalid_symbol"  # not a valid store name (characters, length)
    UNKNOWN_SYMBOL = "unknown_symbol"  # not in the store (at the frequency asked for)
    AMBIGUOUS_SYMBOL = "ambiguous_symbol"  # in several frequency folders and no frequency given
    CORRUPT_FILE = "corrupt_file"  # the symbol's store file cannot be read
    NO_DATA = "no_data"  # no candles at or before as_of
    INVALID_SERIES = "invalid_series"  # inline candles the engine cannot use
    NO_CALENDAR = "no_calendar"  # no future timestamps could be derived from the history
    FORECAST_FAILED = "forecast_failed"  # the engine raised on this symbol's batch
    REPLICA_UNAVAILABLE = "replica_unavailable"  # no replica answered after the retries
    INTERRUPTED = "interrupted"  # the service shut down before this symbol's shard was answered
    STALE = "stale"  # behind the portfolio, left out as the request asked (exclude_stale)

    # -- per request: an HTTP status; in the body's ``code`` (not 422) and in metrics
    INVALID_REQUEST = "invalid_request"  # 422 (body: FastAPI's validation-error shape)
    TOO_LARGE = "too_large"  # 413: body above KRONOS_MAX_BODY_BYTES
    OVERLOADED = "overloaded"  # 503 with Retry-After
    DEADLINE_EXCEEDED = "deadline_exceeded"  # 504: past the request deadline
    # 422 (FastAPI's shape, with this code and the plan): planned past its deadline, not run
    DEADLINE_UNREACHABLE = "deadline_unreachable"
    SHUTTING_DOWN = "shutting_down"  # 503 with Retry-After: the gateway is draining (SIGTERM)
    UNAUTHORIZED = "unauthorized"  # 401: API keys are on and no known key was sent
    FORBIDDEN = "forbidden"  # 403: the key has no access to the route
    RATE_LIMITED = "rate_limited"  # 429 with Retry-After: the key's series/s rate is used up
    LEDGER_OFF = "ledger_off"  # 404 on /v1/accuracy: the forecast ledger is off
    LEDGER_UNAVAILABLE = "ledger_unavailable"  # 503 on /v1/accuracy: the ledger cannot be read

    def __str__(self) -> str:
        return self.value


SYMBOL_ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_SYMBOL,
    ErrorCode.UNKNOWN_SYMBOL,
    ErrorCode.AMBIGUOUS_SYMBOL,
    ErrorCode.CORRUPT_FILE,
    ErrorCode.NO_DATA,
    ErrorCode.INVALID_SERIES,
    ErrorCode.NO_CALENDAR,
    ErrorCode.FORECAST_FAILED,
    ErrorCode.REPLICA_UNAVAILABLE,
    ErrorCode.INTERRUPTED,
    ErrorCode.STALE,
)
"""Codes that can appear in a forecast response's ``errors`` list."""

REQUEST_ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_REQUEST,
    ErrorCode.TOO_LARGE,
    ErrorCode.OVERLOADED,
    ErrorCode.DEADLINE_EXCEEDED,
    ErrorCode.DEADLINE_UNREACHABLE,
    ErrorCode.SHUTTING_DOWN,
    ErrorCode.UNAUTHORIZED,
    ErrorCode.FORBIDDEN,
    ErrorCode.RATE_LIMITED,
    ErrorCode.LEDGER_OFF,
    ErrorCode.LEDGER_UNAVAILABLE,
)
"""Codes of whole-request failures (an HTTP status, counted in metrics)."""


class WarningCode(str, Enum):
    """A forecast was made, but the caller should know something about its input."""

    SHORT_HISTORY = "short_history"  # fewer candles than the deployment's min_history_warning
    # as_of is past the symbol's last stored candle; no longer sent (issue 52: ``stale`` says it,
    # counted in sessions), kept because ledger rows written before may carry it
    AS_OF_AFTER_DATA = "as_of_after_data"
    # the last candle is behind the request's as_of or the portfolio's (sessions missed named)
    STALE = "stale"
    # the deployment's calibration does not apply here; the message says why
    UNCALIBRATED = "uncalibrated"
    HISTORY_CUT = "history_cut"  # the series holds fewer candles than the lookback the caller asked
    MISSING_SESSIONS = "missing_sessions"  # the history skips sessions its exchange held (gaps)

    def __str__(self) -> str:
        return self.value
