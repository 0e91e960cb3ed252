"""The one per-process state of a gateway: its metrics, its Serve replica id, the body limit,
the drain state and the API keys. ``Ingress.__init__`` fills it (``ProcessState.start``);
the middlewares and exception handlers of ``service.app`` read it at each request through
``current()``.

Why a function and not a name to import: ``serve.ingress`` pickles the Ingress class by
value, so a module global that its methods read or assign would be a copy inside the
replica. ``current()`` lives in this module, is pickled by reference, and always returns
this process's one ``ProcessState``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kronos_core.base.errors import ErrorCode
from service.admission import Admission
from service.auth import KeyFileWatch, KeyRing, load_keyring
from service.common.metrics import Metrics
from service.common.settings import Settings
from service.cors import parse_origins
from service.lifecycle import Lifecycle
from service.limits import Limits


@dataclass
class ProcessState:
    metrics: Metrics | None = None  # the gateway's metrics; None until the ingress starts
    gateway_id: str | None = None  # this gateway replica's Serve id, sent back as X-Kronos-Gateway
    limits: Limits = field(default_factory=Limits)  # body size limit (KRONOS_MAX_BODY_BYTES)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # draining, requests in flight
    keyring: KeyRing = field(default_factory=lambda: KeyRing([]))  # API keys and their rate buckets
    cors_origins: frozenset[str] = frozenset()  # KRONOS_CORS_ORIGINS; empty: CORS off
    max_horizon: int | None = None  # the loaded model's max_context once a replica described itself
    key_watch: KeyFileWatch | None = None  # re-reads KRONOS_API_KEYS_FILE when it changes
    admission: Admission | None = None  # forecast slots and their queue; None until it starts
    request_timeout_s: float = 300.0  # the default deadline a queued request's wait is bound by
    # predictor replicas Serve reported running, last seen (ReadyWatch, /readyz); None: not yet.
    # A request's planned time counts them (service.gateway.deadline)
    replicas_running: int | None = None
    # asks a replica for the model (the served schema's limits); None until the ingress starts
    describe_model: Callable[[], Awaitable[Any]] | None = None

    def ring(self) -> KeyRing:
        """The API keys to check a request against (re-read when the keys file changed)."""
        if self.key_watch is not None:
            self.keyring = self.key_watch.current()
        return self.keyring

    def start(self, settings: Settings, metrics: Metrics, gateway_id: str | None) -> None:
        """Configure this process for an ingress built from ``settings``."""
        self.metrics = metrics
        self.gateway_id = gateway_id
        self.limits.max_body_bytes = settings.max_body_bytes
        self.lifecycle.retry_after_s = settings.retry_after_s
        self.lifecycle.grace_s = settings.shutdown_grace_s
        self.lifecycle.shared_dir, self.lifecycle.gauge = metrics.shared_dir, metrics.http_in_flight
        self.keyring = load_keyring(settings)
        self.key_watch = KeyFileWatch(settings, self.keyring) if settings.api_keys_file else None
        self.cors_origins = parse_origins(settings.cors_origins)
        self.request_timeout_s = settings.request_timeout_s
        self.admission = Admission(
            settings.inflight_limit, settings.max_queued_requests, settings.queue_wait_s,
            settings.retry_after_s, on_refuse=lambda: metrics.record_error(ErrorCode.OVERLOADED),
        )


_STATE = ProcessState()


def current() -> ProcessState:
    """This process's state."""
    return _STATE
