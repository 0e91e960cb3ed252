"""The service's log lines, text or JSON, for every process of the service (gateways and
predictor replicas): ``configure_logging`` gives the ``service`` loggers one handler, in the
format of ``KRONOS_LOG_FORMAT`` (``text`` | ``json``), writing to ``KRONOS_LOG_DIR``
(``kronos-<role>-<pid>.log``, rotated at ``LOG_MAX_BYTES``, ``LOG_BACKUPS`` kept) or, by
default, to the process's stderr (Ray keeps a Serve replica's stderr in its worker ``.err``
file: docs/operations.md, "Logs"). A line written while a request runs carries its id
(``current_request_id``, set by the gateway's ``service.request_log.RequestIdMiddleware``)."""

from __future__ import annotations

import contextvars
import datetime as _dt
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

import orjson

# the id of the request being served (set by the gateway's RequestIdMiddleware)
REQUEST_ID_VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kronos_request_id", default=None
)

# fields a record may carry (``extra=``) that the JSON line keeps
_FIELDS = (
    "request_id", "method", "route", "status", "key", "symbols", "duration_ms", "timing",
    "error_code",
)


def current_request_id() -> str | None:
    """The id of the request this code runs for (None outside a request)."""
    return REQUEST_ID_VAR.get()


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


LOG_MAX_BYTES = 50 * 2**20  # a log file is rotated at this size ...
LOG_BACKUPS = 3  # ... keeping this many older ones (<file>.1 .. .3): at most 200 MiB a process

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
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
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
