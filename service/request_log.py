"""One request id end to end, and the gateway's log lines (text or JSON).

The id: Serve's HTTP proxy puts an ``X-Request-Id`` on every request it forwards (the
caller's own, kept, or a new UUID) and sends it back as the response's ``X-Request-Id``.
``RequestIdMiddleware`` takes that id (or makes one when no proxy set it: a test client) and
holds it for the request: the forecast's shards, its answer's ``request_id``, its ledger rows
and every log line written while the request runs (``current_request_id``) carry it.

The log lines: ``configure_logging`` gives the ``service`` loggers one handler, in the
format of ``KRONOS_LOG_FORMAT`` (``text`` | ``json``), writing to ``KRONOS_LOG_DIR``
(``kronos-<role>-<pid>.log``) or, by default, to the process's stderr (Ray keeps a Serve
replica's stderr in its worker ``.err`` file: docs/operations.md, "Logs"). The gateway writes
one access line per request (``log_access``): request id, method, route, status, key name,
symbols, and timings.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import logging
import os
import sys
import uuid
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import orjson

REQUEST_ID_HEADER = b"x-request-id"
MAX_REQUEST_ID = 128  # a caller's id longer than this is cut (it goes into logs and the ledger)
ACCESS_LOGGER = "service.access"

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kronos_request_id", default=None
)
# fields a record may carry (``extra=``) that the JSON line keeps
_FIELDS = (
    "request_id", "method", "route", "status", "key", "symbols", "duration_ms", "timing",
    "error_code",
)


def current_request_id() -> str | None:
    """The id of the request this code runs for (None outside a request)."""
    return _request_id.get()


def request_id_of(scope: MutableMapping[str, Any]) -> str | None:
    """The id ``RequestIdMiddleware`` gave this request (None outside it)."""
    return scope.get("state", {}).get("request_id")


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1").strip()
    return None


class RequestIdMiddleware:
    """Gives each HTTP request its id: the ``X-Request-Id`` header (Serve's proxy sets it, a
    caller's own is kept), else a new UUID, which is then also sent back as ``X-Request-Id``
    (behind Serve the proxy sends it back itself)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID_HEADER)
        rid = (given or str(uuid.uuid4()))[:MAX_REQUEST_ID]
        scope.setdefault("state", {})["request_id"] = rid
        token = _request_id.set(rid)

        async def send_with_id(message):
            if message["type"] == "http.response.start" and not given:
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"], (REQUEST_ID_HEADER, rid.encode("latin-1")),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id if not given else send)
        finally:
            _request_id.reset(token)


class _RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (``record.request_id``, None outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ms), ``level``, ``logger``, ``message``, the
    request's fields when it has them, ``exc`` with a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def log_file(log_dir: str, role: str) -> Path:
    """This process's log file under ``log_dir``."""
    return Path(log_dir) / f"kronos-{role}-{os.getpid()}.log"


def configure_logging(settings: Any, role: str) -> logging.Handler:
    """The ``service`` loggers' handler for this process, per ``settings.log_format`` and
    ``settings.log_dir`` (idempotent: a second call replaces the first handler)."""
    logger = logging.getLogger("service")
    for old in [h for h in logger.handlers if getattr(h, "_kronos", False)]:
        logger.removeHandler(old)
        old.close()
    handler: logging.Handler
    if settings.log_dir:
        path = log_file(settings.log_dir, role)
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
        logger.propagate = False  # one line per record on stderr, not Ray's copy beside ours
    setattr(handler, "_kronos", True)  # noqa: B010 - marks the handler this module added
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(
        JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


def log_access(method: str, route: str, status: int, duration_s: float,
               scope: MutableMapping[str, Any]) -> None:
    """The access line of one request (INFO, logger ``service.access``)."""
    state = scope.get("state", {})
    key = state.get("api_key")
    fields = {
        "request_id": state.get("request_id"), "method": method, "route": route, "status": status,
        "key": getattr(key, "name", None), "symbols": state.get("symbols"),
        "duration_ms": round(duration_s * 1e3, 3), "timing": state.get("timing"),
        "error_code": state.get("error_code"),
    }
    logging.getLogger(ACCESS_LOGGER).info(
        "%s %s %d in %.1f ms (key %s, %s symbol(s))", method, route, status, duration_s * 1e3,
        fields["key"] or "-", fields["symbols"] if fields["symbols"] is not None else "-",
        extra=fields,
    )
