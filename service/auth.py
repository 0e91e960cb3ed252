"""Optional API keys and per-key rate limits (off unless keys are configured).

Keys are given as SHA-256 hashes, never in clear, one per line, in a file
(``KRONOS_API_KEYS_FILE``) or an environment variable (``KRONOS_API_KEYS``, lines or ``;``)::

    # sha256(key)                                                     name    routes            series/s
    9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  alice   forecast,symbols  200
    2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae  ops     *                 -

``routes``: ``forecast``, ``models``, ``symbols``, ``candles`` (``/v1/candles``, stored prices:
a scope of its own, so that no existing key gains price reads unasked), ``accuracy``
(``/v1/accuracy``, which lists every recorded symbol), ``docs`` (``/docs`` and ``/openapi.json``)
or ``*`` (all of them); the probes (``/healthz``, ``/readyz``), ``/metrics`` and the forecast
explorer's page and assets (``/ui``, ``/ui/assets/...``: the page asks for a key, its API calls
send it) stay open, and a CORS preflight is answered before the key check (``service.cors``).
Paths are matched below the app's mount point (its ``root_path``), so an app served under a
route prefix is checked the same. ``series/s``: the key's rate limit (``-`` for none).
Clients send ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. No key: 401; a key
without access to the route: 403; above its rate: 429 with ``Retry-After``. Logs and metrics
name a key by its ``name`` only.
"""  # noqa: E501

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
from dataclasses import dataclass, field

import orjson

from kronos_core.base.errors import ErrorCode

ROUTES = ("forecast", "models", "symbols", "candles", "accuracy", "docs")
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/ui")
OPEN_PREFIXES = ("/ui/assets/",)  # the forecast explorer's scripts and styles
_ROUTE_OF_PATH = {"/v1/forecast": "forecast", "/forecast": "forecast", "/v1/models": "models",
                  "/v1/symbols": "symbols", "/v1/candles": "candles", "/v1/accuracy": "accuracy",
                  "/docs": "docs", "/openapi.json": "docs"}
_DOCS_PREFIX = "/docs/"  # the docs page's assets


def route_of_path(path: str) -> str | None:
    """The permission a path needs (None: any valid key)."""
    if path.startswith(_DOCS_PREFIX):
        return "docs"
    return _ROUTE_OF_PATH.get(path)


def app_path(scope) -> str:
    """The request's path below the app's mount point: Starlette keeps the ``root_path`` (a
    Serve route prefix, e.g. ``/keyed``) in ``scope['path']``; the checks compare what is
    below it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root):] or "/"
    return path


def is_open(path: str) -> bool:
    """No key needed: the probes, ``/metrics``, and the forecast explorer's page and assets."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class KeyFileError(ValueError):
    """A key line that cannot be used; the message names the line and the fix."""


@dataclass
class ApiKey:
    name: str
    sha256: str
    routes: frozenset[str]
    series_per_s: float | None  # None: no rate limit


@dataclass
class TokenBucket:
    """Series-per-second budget of one key. A request may take the balance below zero (a
    large portfolio is never refused forever); the next waits until it is back above zero."""

    rate: float
    capacity: float
    balance: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.balance = self.capacity

    def take(self, n: int, now: float | None = None) -> float:
        """0 when admitted (``n`` series taken), else the seconds to wait."""
        now = time.monotonic() if now is None else now
        self.balance = min(self.capacity, self.balance + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.balance < 0:
            return -self.balance / self.rate
        self.balance -= n
        return 0.0


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_keys(text: str, source: str) -> list[ApiKey]:
    keys: list[ApiKey] = []
    lines = text.replace(";", "\n").splitlines()
    for no, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 4:
            raise KeyFileError(
                f"{source} line {no}: expected 4 fields 'sha256 name routes series_per_s', "
                f"got {len(parts)}"
            )
        digest, name, routes, rate = parts
        if not _HEX64.match(digest.lower()):
            raise KeyFileError(
                f"{source} line {no}: the first field must be the key's SHA-256 in hex "
                "(64 characters; `python -c \"import hashlib; "
                "print(hashlib.sha256(b'KEY').hexdigest())\"`)"
            )
        names = frozenset(ROUTES) if routes == "*" else frozenset(routes.split(","))
        unknown = sorted(names - set(ROUTES))
        if unknown:
            raise KeyFileError(
                f"{source} line {no}: unknown route(s) {unknown}; use {', '.join(ROUTES)} or *"
            )
        try:
            per_s = None if rate == "-" else float(rate)
        except ValueError:
            per_s = math.nan
        if per_s is not None and not (per_s > 0 and math.isfinite(per_s)):
            raise KeyFileError(f"{source} line {no}: series_per_s must be a positive number or -")
        keys.append(ApiKey(name, digest.lower(), names, per_s))
    return keys


class KeyRing:
    """The configured keys and their rate buckets (per gateway process).

    With ``share`` gateway replicas each bucket fills at ``series_per_s / share`` and holds that
    share of the burst: Serve's proxies spread requests evenly over the gateways, so the key's
    total stays at its ``series_per_s`` without a shared counter on the request path."""

    def __init__(
        self, keys: list[ApiKey], burst_s: float = 10.0, share: int = 1, closed: bool = False
    ):
        self.keys = {k.sha256: k for k in keys}
        self.buckets = {
            k.name: TokenBucket(k.series_per_s / share, k.series_per_s * burst_s / share)
            for k in keys
            if k.series_per_s
        }
        # keys required even with none configured: a keys file emptied while the service runs
        # refuses everyone rather than opening the service to anyone (KeyFileWatch)
        self.closed = closed

    @property
    def enabled(self) -> bool:
        return bool(self.keys) or self.closed

    def keep_buckets(self, old: KeyRing) -> KeyRing:
        """Carry ``old``'s rate buckets over for the keys whose name and rate are unchanged (a
        reload does not hand every key a fresh burst). Returns self."""
        for name, bucket in self.buckets.items():
            before = old.buckets.get(name)
            if before is not None and before.rate == bucket.rate:
                self.buckets[name] = before
        return self

    def lookup(self, presented: str | None) -> ApiKey | None:
        if not presented:
            return None
        digest = hash_key(presented)
        for known, key in self.keys.items():
            if hmac.compare_digest(known, digest):
                return key
        return None

    def throttle(self, key: ApiKey | None, series: int) -> float:
        """Seconds to wait before ``key`` may run ``series`` more series (0: go)."""
        bucket = self.buckets.get(key.name) if key else None
        return bucket.take(series) if bucket else 0.0


def load_keyring(settings) -> KeyRing:
    """Keys from ``settings.api_keys`` and ``settings.api_keys_file`` (both may be given)."""
    from pathlib import Path

    keys: list[ApiKey] = []
    if settings.api_keys:
        keys += parse_keys(settings.api_keys, "KRONOS_API_KEYS")
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise KeyFileError(
                f"KRONOS_API_KEYS_FILE {path}: cannot read it ({exc.strerror})"
            ) from None
        keys += parse_keys(text, str(path))
    return KeyRing(keys, settings.rate_burst_s, share=settings.gateway_replicas)


KEYS_CHECK_S = 1.0  # how often a request may look at the keys file's stat (cheap, no read)


class KeyFileWatch:
    """Re-reads ``KRONOS_API_KEYS_FILE`` when it changes, so that a key is added or removed
    without a restart (on Kubernetes the mounted Secret's file changes in place within about a
    minute of ``kubectl apply`` of the Secret). At most every ``KEYS_CHECK_S`` a request looks at
    the file's stat (inode, size, mtime; a Secret volume swaps a symlink, which ``stat``
    follows); a changed file is parsed, and the new ring replaces the old one, the rate buckets
    of unchanged keys kept. A file that cannot be read or parsed keeps the old keys and logs an
    error once per version; a file that holds no key any more refuses everyone (401) instead of
    opening the service."""

    def __init__(self, settings, ring: KeyRing):
        self.settings = settings
        self.path = settings.api_keys_file
        self.ring = ring
        self.signature = self._stat()
        self.checked = time.monotonic()

    def _stat(self) -> tuple[int, int, int] | None:
        import os

        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def current(self, now: float | None = None) -> KeyRing:
        """The ring to use now (reloaded first when the file changed)."""
        import logging

        now = time.monotonic() if now is None else now
        if self.path is None or now - self.checked < KEYS_CHECK_S:
            return self.ring
        self.checked = now
        signature = self._stat()
        if signature == self.signature:
            return self.ring
        self.signature = signature
        log = logging.getLogger(__name__)
        try:
            fresh = load_keyring(self.settings)
        except KeyFileError as exc:
            log.error("API keys not reloaded, the previous %d key(s) stay: %s",
                      len(self.ring.keys), exc)
            return self.ring
        fresh.closed = self.ring.enabled  # a service with keys never opens by losing them all
        self.ring = fresh.keep_buckets(self.ring)
        log.warning("API keys reloaded from %s: %d key(s) (%s)", self.path, len(fresh.keys),
                    ", ".join(sorted(k.name for k in fresh.keys.values())) or "none: all refused")
        return self.ring


def _presented_key(scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return None


def key_id(presented: str | None) -> str:
    """How logs name a key that matched none: ``sha256:`` and the first 12 hex digits of its
    hash (never the key), or ``-`` when none was sent. An operator compares it with the
    hashes of the keys file."""
    return f"sha256:{hash_key(presented)[:12]}" if presented else "-"


def _refused(scope, who: str, route: str | None, status: int) -> None:
    """One WARNING line per refused request, naming the key (its name, or ``key_id``) and the
    route; the access line carries the same ``key``."""
    import logging

    path = scope.get("path", "")
    scope.setdefault("state", {})["refused_key"] = who
    logging.getLogger(__name__).warning(
        "%d: key %s refused for %s %s%s", status, who, scope.get("method", "-"), path,
        f" (route {route!r} not among its routes)" if route else " (no known key)",
        extra={"key": who, "route": path, "status": status},
    )


async def _deny(send, status: int, code: str, detail: str) -> None:
    body = orjson.dumps({"detail": detail, "code": code})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="kronos"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware:
    """401 / 403 before the app runs; the key found goes to ``scope['state']['api_key']`` for
    the forecast route's rate limit. The ring is read at each request from ``get_ring()`` (the
    app passes this process's ``service.state.current().keyring``); none: no keys."""

    def __init__(self, app, get_ring=None):
        self.app = app
        none = KeyRing([])
        self.get_ring = get_ring or (lambda: none)

    async def __call__(self, scope, receive, send):
        ring = self.get_ring()
        if scope["type"] != "http" or not ring.enabled or is_open(app_path(scope)):
            await self.app(scope, receive, send)
            return
        presented = _presented_key(scope)
        key = ring.lookup(presented)
        if key is None:
            _refused(scope, key_id(presented), None, 401)
            await _deny(
                send, 401, ErrorCode.UNAUTHORIZED.value,
                "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            )
            return
        route = route_of_path(app_path(scope))
        if route is not None and route not in key.routes:
            _refused(scope, key.name, route, 403)
            await _deny(
                send, 403, ErrorCode.FORBIDDEN.value, f"key {key.name!r} has no access to {route}"
            )
            return
        scope.setdefault("state", {})["api_key"] = key
        await self.app(scope, receive, send)

