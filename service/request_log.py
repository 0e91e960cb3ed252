"""One request id end to end, and the gateway's log lines (text or JSON).

The id: Serve's HTTP proxy puts an ``X-Request-Id`` on every request it forwards (the
caller's own, kept, or a new UUID) and sends it back as the response's ``X-Request-Id``.
``RequestIdMiddleware`` takes that id (or makes one when no proxy set it: a test client) and
holds it for the request: the forecast's shards, its answer's ``request_id``, its ledger rows
and every log line written while the request runs (``current_request_id``) carry it.

The log lines are set up by ``service.common.logs`` (re-exported here). The gateway writes
one access line per request (``log_access``): request id, method, route, status, key name,
symbols, and timings.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import MutableMapping
from typing import Any

from service.common.logs import (  # noqa: F401 - re-exported: the gateway's names for them
    REQUEST_ID_VAR,
    TEXT_FORMAT,
    JsonFormatter,
    configure_logging,
    current_request_id,
    log_file,
)

REQUEST_ID_HEADER = b"x-request-id"
MAX_REQUEST_ID = 128  # a caller's id longer than this is replaced (it goes into logs, the ledger)
# a caller's id is kept only when it is 1 to MAX_REQUEST_ID of these: nothing that could break a
# log line, a header or a file name (no spaces, quotes, control characters, slashes)
_SAFE_ID = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_REQUEST_ID}}}")
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "service.request_log.proxy_middlewares"
ACCESS_LOGGER = "service.access"


def request_id_of(scope: MutableMapping[str, Any]) -> str | None:
    """The id ``RequestIdMiddleware`` gave this request (None outside it)."""
    return scope.get("state", {}).get("request_id")


def safe_request_id(given: str | None) -> bool:
    """Whether a caller's ``X-Request-Id`` is kept: at most ``MAX_REQUEST_ID`` characters of
    letters, digits and ``.``, ``_``, ``:``, ``-``. Any other is replaced by a new UUID."""
    return given is not None and _SAFE_ID.fullmatch(given) is not None


class ProxyRequestIdGuard:
    """Serve's proxy keeps the caller's ``X-Request-Id`` as the request's id, logs it and sends
    it back. Installed in the proxy (``proxy_middlewares``), outside Serve's own id middleware,
    this drops a caller's id that ``safe_request_id`` refuses, so the proxy makes a new UUID
    instead and the caller's text is neither echoed nor logged."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = scope.get("headers") if scope.get("type") in ("http", "websocket") else None
        if headers:
            kept = [
                (k, v) for k, v in headers
                if k.lower() != REQUEST_ID_HEADER or safe_request_id(v.decode("latin-1").strip())
            ]
            if len(kept) != len(headers):
                scope = {**scope, "headers": kept}
        await self.app(scope, receive, send)


def proxy_middlewares() -> list:
    """Serve's HTTP proxy callback (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` =
    ``service.request_log.proxy_middlewares``, set by ``kronos serve`` and the manifests):
    the middlewares the proxy wraps around its own."""
    from starlette.middleware import Middleware

    return [Middleware(ProxyRequestIdGuard)]


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1").strip()
    return None


class RequestIdMiddleware:
    """Gives each HTTP request its id: the ``X-Request-Id`` header (Serve's proxy sets it, a
    caller's own is kept when ``safe_request_id``), else a new UUID, which is then also sent
    back as ``X-Request-Id`` (behind Serve the proxy sends it back itself)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID_HEADER)
        if not safe_request_id(given):
            given = None  # too long or unsafe: a new id, sent back in place of the caller's
        rid = given or str(uuid.uuid4())
        scope.setdefault("state", {})["request_id"] = rid
        token = REQUEST_ID_VAR.set(rid)

        async def send_with_id(message):
            if message["type"] == "http.response.start" and not given:
                message["headers"] = [
                    *(h for h in message.get("headers", ()) if h[0].lower() != REQUEST_ID_HEADER),
                    (REQUEST_ID_HEADER, rid.encode("latin-1")),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id if not given else send)
        finally:
            REQUEST_ID_VAR.reset(token)


def log_access(method: str, route: str, status: int, duration_s: float,
               scope: MutableMapping[str, Any]) -> None:
    """The access line of one request (INFO, logger ``service.access``)."""
    state = scope.get("state", {})
    key = state.get("api_key")
    fields = {
        "request_id": state.get("request_id"), "method": method, "route": route, "status": status,
        "key": getattr(key, "name", None) or state.get("refused_key"),
        "symbols": state.get("symbols"),
        "duration_ms": round(duration_s * 1e3, 3), "timing": state.get("timing"),
        "error_code": state.get("error_code"),
    }
    logging.getLogger(ACCESS_LOGGER).info(
        "%s %s %d in %.1f ms (key %s, %s symbol(s))", method, route, status, duration_s * 1e3,
        fields["key"] or "-", fields["symbols"] if fields["symbols"] is not None else "-",
        extra=fields,
    )
