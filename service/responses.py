"""The service's JSON responses, and the one answer to a request-level error."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

from service.common.errors import ServiceError
from service.common.metrics import Metrics


def json_response(
    content, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``content`` as JSON (numpy arrays and non-string keys allowed)."""
    return Response(
        orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS),
        status_code=status_code, media_type="application/json", headers=headers,
    )


def error_response(exc: ServiceError, metrics: Metrics | None) -> Response:
    """The answer to a request-level error: its status, body and headers (``Retry-After``),
    counted in ``kronos_errors_total{code}``. ``service.app``'s exception handlers are its
    only callers on the request path."""
    if metrics is not None:
        metrics.record_error(exc.code)
    return json_response(exc.body(), exc.status, exc.headers())
