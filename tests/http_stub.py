"""What the tests' stand-in HTTP servers (``http.server``) share: one answer written whole."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def send(handler: BaseHTTPRequestHandler, status: int, payload: bytes,
         media: str = "application/json", headers: dict | None = None) -> None:
    """Answer ``status`` with ``payload`` of type ``media`` and the extra ``headers``."""
    handler.send_response(status)
    handler.send_header("Content-Type", media)
    handler.send_header("Content-Length", str(len(payload)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(payload)
