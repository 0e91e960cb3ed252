"""The service's request-level errors: each type carries its ``ErrorCode`` and HTTP status,
and knows its response body and headers. They are raised where the failure is found (the
gateway's stages, the replica adapter, the forecast route) and answered in one place,
``service.app``'s exception handler, which also counts them in ``kronos_errors_total``.

Per-symbol failures are not exceptions: they travel as ``{symbol, code, message}`` entries
of the answer's ``errors`` list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kronos_core.base.errors import ErrorCode


class ServiceError(Exception):
    """A whole request failed: answer ``status`` with ``body()`` and ``headers()``.
    ``retry_after_s``: sent as ``Retry-After`` when set."""

    code: ClassVar[ErrorCode]
    status: ClassVar[int]

    def __init__(self, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {"detail": self.message, "code": self.code}

    def headers(self) -> Mapping[str, str] | None:
        return None if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


class RequestInvalid(ServiceError):
    """A request the service cannot run as asked: 422 in FastAPI's validation-error shape,
    ``{"detail": [{loc, msg, type}, ...]}`` (no ``code`` in the body: the shape is FastAPI's).
    ``field`` names the culprit; ``details``: (loc, message) per culprit, when there are several.
    ``RequestInvalid.of(detail)`` takes entries already in that shape (FastAPI's own
    validation errors, an unreadable body)."""

    code = ErrorCode.INVALID_REQUEST
    status = 422

    def __init__(
        self, field: str, message: str, details: list[tuple[list[str | int], str]] | None = None
    ):
        super().__init__(message)
        self.field = field
        self.details = details
        pairs = details or [(["body", field], message)]
        self._detail = [{"loc": loc, "msg": msg, "type": "value_error"} for loc, msg in pairs]

    @classmethod
    def of(cls, detail: list[dict[str, Any]]) -> RequestInvalid:
        """The error of ``detail`` entries (``loc``, ``msg``, ``type``) as they are."""
        loc = detail[0]["loc"] if detail else ["body"]
        message = detail[0]["msg"] if detail else "invalid request"
        exc = cls(str(loc[-1]) if loc else "body", message)
        exc._detail = list(detail)
        return exc

    def detail(self) -> list[dict[str, Any]]:
        return self._detail

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail()}


class DeadlineUnreachable(RequestInvalid):
    """A request planned past its deadline (``service.gateway.deadline``), refused before any
    shard is sent: a 422 in FastAPI's validation-error shape, one entry whose ``loc`` names what
    set the deadline (the ``X-Kronos-Timeout-S`` header, else the body) and whose ``type`` is the
    code, with ``code`` and ``plan`` (the estimate, the deadline and what would fit) beside
    ``detail``."""

    code = ErrorCode.DEADLINE_UNREACHABLE

    def __init__(self, message: str, loc: list[str | int], plan: dict[str, Any]):
        super().__init__(str(loc[-1]), message, [(loc, message)])
        self._detail[0]["type"] = ErrorCode.DEADLINE_UNREACHABLE.value
        self.plan = plan

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail(), "code": self.code, "plan": self.plan}


class TooLarge(ServiceError):
    """413: the body is above ``KRONOS_MAX_BODY_BYTES``."""

    code = ErrorCode.TOO_LARGE
    status = 413

    def __init__(self, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self._headers = headers

    def headers(self) -> Mapping[str, str] | None:
        return self._headers


class RateLimited(ServiceError):
    """429 with Retry-After: the API key's series/s rate is used up."""

    code = ErrorCode.RATE_LIMITED
    status = 429


class Overloaded(ServiceError):
    """Too much work queued: 503 with Retry-After."""

    code = ErrorCode.OVERLOADED
    status = 503

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, retry_after_s)


class DeadlineExceeded(ServiceError):
    """The request ran past its deadline (504); its pending shards were cancelled."""

    code = ErrorCode.DEADLINE_EXCEEDED
    status = 504


class ReplicaGone(ServiceError):
    """The replica running a shard died or is unreachable: the shard may be retried (the
    gateway turns a shard whose retries all failed into per-symbol ``replica_unavailable``
    errors; this answers 503 only should it ever escape)."""

    code = ErrorCode.REPLICA_UNAVAILABLE
    status = 503


class LedgerOff(ServiceError):
    """404 on ``/v1/accuracy``: the forecast ledger is off, nothing is recorded or scored."""

    code = ErrorCode.LEDGER_OFF
    status = 404


class LedgerUnavailable(ServiceError):
    """503 on ``/v1/accuracy``: the ledger folder cannot be read (the message says why)."""

    code = ErrorCode.LEDGER_UNAVAILABLE
    status = 503
