"""Checks made before the service takes work, each failing with what is wrong and the fix:
the forecast ledger's folder is writable (or the ledger is explicitly ``off``), a public
bind has API keys (or ``KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS``), and the metrics port is not the
API port. ``kronos serve`` runs them before it starts Ray; ``build_app`` (the Serve-config path
KubeRay uses) checks the bind and the metrics port, and
each gateway checks the ledger folder on its own node as it starts (the build may run on a
node without the ledger's volume)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from service.common.settings import Settings

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LEDGER_OFF_NOTE = (
    "the forecast ledger is off (KRONOS_LEDGER_DIR=off): no forecast is recorded, /v1/accuracy "
    "answers 404 ledger_off, and the band-coverage alert cannot fire"
)


class StartupError(ValueError):
    """The service must not start so; the message names the setting to change."""


def ledger_problem(settings: Settings) -> str | None:
    """What keeps the ledger folder from being written (None: writable, or the ledger is off).
    Makes the folder when missing and writes and removes a probe file in it."""
    folder = settings.resolved_ledger_dir()
    if folder is None:
        return None
    probe = Path(folder) / f".kronos-write-check-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return (
            f"the forecast ledger folder {folder} is not writable ({why}): mount a writable volume "
            "there or point KRONOS_LEDGER_DIR (--ledger) at one, or set KRONOS_LEDGER_DIR=off to "
            "run without the ledger (no /v1/accuracy figures, no band-coverage alert)"
        )
    return None


def check_ledger(settings: Settings) -> None:
    """Raise ``StartupError`` for an unwritable ledger folder."""
    problem = ledger_problem(settings)
    if problem:
        raise StartupError(problem)


def public_bind_problem(settings: Settings, keys_enabled: bool) -> str | None:
    """Why the service must not bind ``settings.host`` (None: loopback, keys on, or allowed)."""
    if keys_enabled or settings.host in LOOPBACK_HOSTS or settings.allow_public_without_keys:
        return None
    return (
        f"the service would listen on {settings.host} with no API keys: anyone who can reach the "
        "port could run forecasts. Set KRONOS_API_KEYS or KRONOS_API_KEYS_FILE (SHA-256-hashed "
        "keys, docs/service.md; on Kubernetes from a Secret, deploy/README.md), bind 127.0.0.1, or "
        "set KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS=true to accept it"
    )


def metrics_port_problem(settings: Settings) -> str | None:
    """Why ``KRONOS_METRICS_PORT`` cannot work (None: unset, or another port than the API's)."""
    if settings.metrics_port is None or settings.metrics_port != settings.port:
        return None
    return (
        f"KRONOS_METRICS_PORT ({settings.metrics_port}) is the API port (--port, KRONOS_PORT): "
        "the API port's /metrics is closed when a metrics port is set, so nothing would serve "
        "the metrics. Choose another port (the manifests use 9090), or unset KRONOS_METRICS_PORT "
        "to serve /metrics on the API port"
    )


def check_startup(settings: Settings, announce: bool = True) -> None:
    """``build_app``'s check (the public bind); ``announce``: log the ledger's ``off`` (once
    per start). Raises ``StartupError``."""
    from service.auth import load_keyring

    problem = public_bind_problem(settings, load_keyring(settings).enabled)
    problem = problem or metrics_port_problem(settings)
    if problem:
        raise StartupError(problem)
    if announce and settings.resolved_ledger_dir() is None:
        log.warning(LEDGER_OFF_NOTE)
