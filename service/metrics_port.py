"""``/metrics`` on an internal port of its own (``KRONOS_METRICS_PORT``), away from the public
API port. Every gateway on the node tries to bind it; one holds it and answers the totals of
all of them (they share their metric files), the others retry every ``RETRY_S`` seconds, so
a gateway that dies hands the port to another within that time."""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

RETRY_S = 15.0


def _handler(exposition: Callable[[], bytes], content_type: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = exposition()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - scrapes are not logged
            pass

    return Handler


class MetricsPort:
    """The thread that holds (or keeps trying to hold) the metrics port."""

    def __init__(self, host: str, port: int, exposition: Callable[[], bytes], content_type: str):
        self.host, self.port = host, port
        self.handler = _handler(exposition, content_type)
        self.server: ThreadingHTTPServer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kronos-metrics-port", daemon=True)

    def start(self) -> MetricsPort:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.server = ThreadingHTTPServer((self.host, self.port), self.handler)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    log.error(
                        "metrics port %s:%d: %s; /metrics is not served", self.host, self.port, exc
                    )
                    return
                self._stop.wait(RETRY_S)  # another gateway of the node holds it
                continue
            log.info("metrics on http://%s:%d/metrics", self.host, self.port)
            self.server.serve_forever(poll_interval=0.5)
            return

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
