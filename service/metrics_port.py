"""``/metrics`` on an internal port of its own (``KRONOS_METRICS_PORT``), away from the public
API port. Every gateway on the node tries to bind it; one holds it and answers the totals of
all of them (they share their metric files), the others retry every ``RETRY_S`` seconds, so
a gateway that dies hands the port to another within that time.

A port held by something that is not a Kronos gateway (another program, or the API port
itself) is a conflict, not a turn to wait for: the gateway asks the holder for ``/metrics``,
and when the answer is not Kronos metrics it logs an error once, naming the port and the fix,
and sets ``conflict``, so that the public port's ``/metrics`` serves the metrics meanwhile
(``service.app``). It keeps trying the port, and takes it when it frees."""

from __future__ import annotations

import errno
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

RETRY_S = 15.0
PROBE_TIMEOUT_S = 2.0
METRIC_PREFIX = b"kronos_"  # what a gateway's /metrics answer holds


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


def held_by_a_gateway(host: str, port: int) -> bool:
    """Whether ``host:port`` answers ``/metrics`` with Kronos metrics (another gateway of the
    node holds it), as opposed to another program or the API port's 404."""
    probe = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    try:
        with urllib.request.urlopen(
            f"http://{probe}:{port}/metrics", timeout=PROBE_TIMEOUT_S
        ) as answer:
            return answer.status == 200 and METRIC_PREFIX in answer.read(1 << 20)
    except (OSError, ValueError):  # refused, 404 (HTTPError), not HTTP at all, timed out
        return False


class MetricsPort:
    """The thread that holds (or keeps trying to hold) the metrics port."""

    def __init__(self, host: str, port: int, exposition: Callable[[], bytes], content_type: str):
        self.host, self.port = host, port
        self.handler = _handler(exposition, content_type)
        self.server: ThreadingHTTPServer | None = None
        # why the port cannot be ours (None: held by us or by another gateway): the public
        # port's /metrics serves while this is set
        self.conflict: str | None = None
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
                    self._conflict(f"{exc.strerror or exc}")
                    return
                if held_by_a_gateway(self.host, self.port):
                    self.conflict = None  # another gateway of the node serves the totals
                else:
                    self._conflict("in use by something that does not serve Kronos metrics")
                self._stop.wait(RETRY_S)
                continue
            if self.conflict is not None:
                log.warning("metrics port %s:%d is free again: metrics served there now",
                            self.host, self.port)
            self.conflict = None
            log.info("metrics on http://%s:%d/metrics", self.host, self.port)
            self.server.serve_forever(poll_interval=0.5)
            return

    def _conflict(self, why: str) -> None:
        if self.conflict is None:  # logged once, not at every retry
            log.error(
                "metrics port %s:%d (KRONOS_METRICS_PORT): %s; /metrics is served on the API "
                "port meanwhile. Choose a free port for KRONOS_METRICS_PORT, other than the API "
                "port", self.host, self.port, why,
            )
        self.conflict = why

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
