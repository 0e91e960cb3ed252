"""Cross-origin requests from browsers, off unless ``KRONOS_CORS_ORIGINS`` names origins.

A preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is answered
here, before the API key check (a browser sends no key with it): 204, with the
``Access-Control-Allow-*`` headers when the origin is allowed, without them otherwise (the
browser then does not send the request). An allowed origin's actual requests get
``Access-Control-Allow-Origin`` and the headers a client reads exposed (``X-Request-Id``,
``Retry-After``, ``X-Kronos-Errors``, ``X-Kronos-Gateway``). The origins are read at each
request from ``get_origins()`` (the app passes ``service.state.current().cors_origins``).
"""

from __future__ import annotations

from collections.abc import Callable

ALLOW_METHODS = b"GET, POST, OPTIONS"
ALLOW_HEADERS = b"Authorization, X-API-Key, Content-Type, Accept, X-Kronos-Timeout-S, X-Request-Id"
EXPOSE_HEADERS = b"X-Request-Id, Retry-After, X-Kronos-Errors, X-Kronos-Gateway"
MAX_AGE_S = b"600"


def parse_origins(value: str | None) -> frozenset[str]:
    """``KRONOS_CORS_ORIGINS`` as a set (``*``: any origin); empty: CORS off."""
    return frozenset(o.strip().rstrip("/") for o in (value or "").split(",") if o.strip())


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class CorsMiddleware:
    def __init__(self, app, get_origins: Callable[[], frozenset[str]] | None = None):
        self.app = app
        self.get_origins = get_origins or frozenset

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = _header(scope, b"origin")
        origins = self.get_origins()
        allowed = origin is not None and ("*" in origins or origin.rstrip("/") in origins)
        preflight = (scope["method"] == "OPTIONS" and origin is not None
                     and _header(scope, b"access-control-request-method") is not None)
        if preflight:
            headers = [(b"content-length", b"0"), (b"vary", b"Origin")]
            if allowed and origin is not None:
                headers += [(b"access-control-allow-origin", origin.encode("latin-1")),
                            (b"access-control-allow-methods", ALLOW_METHODS),
                            (b"access-control-allow-headers", ALLOW_HEADERS),
                            (b"access-control-max-age", MAX_AGE_S)]
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        if not allowed:
            await self.app(scope, receive, send)
            return
        assert origin is not None

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"access-control-expose-headers", EXPOSE_HEADERS), (b"vary", b"Origin"),
                ]
            await send(message)

        await self.app(scope, receive, send_with_cors)
