"""The load test's own accounting, against a stub HTTP server (no model, no Ray): a service that
sheds every request (503 + Retry-After) must not pass, and shed requests are reported apart."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from http_stub import send

# not imported here: locust monkey-patches the process (gevent); it runs in a subprocess
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None, reason="pip install -e '.[load]'"
)

REPO = Path(__file__).resolve().parents[2]
SYMBOLS = [f"S{i:03d}" for i in range(60)]


def _stub(shed: bool) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(
            self, code: int, body: bytes, ctype: str = "application/json",
            headers: dict | None = None,
        ):
            send(self, code, body, ctype, headers)

        def do_GET(self):
            self._send(200, json.dumps({"symbols": SYMBOLS, "total": len(SYMBOLS)}).encode())

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if shed:
                self._send(
                    503, b'{"detail": "busy", "code": "overloaded"}', headers={"Retry-After": "1"}
                )
            elif "arrow" in (self.headers.get("Accept") or ""):
                self._send(200, b"arrow-bytes", "application/vnd.apache.arrow.stream")
            else:
                body = {"forecasts": [{"symbol": s} for s in req["symbols"]], "errors": []}
                self._send(200, json.dumps(body).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _run(server: ThreadingHTTPServer, out: Path) -> tuple[int, dict]:
    host = f"http://127.0.0.1:{server.server_address[1]}"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtests.run", "--host", host, "--users", "2", "--spawn-rate", "2",
         "--run-time", "2s", "--out", str(out), "--min-ok", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )
    return proc.returncode, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("shed", [True, False])
def test_shed_requests_are_not_successes(tmp_path, shed):
    server = _stub(shed)
    try:
        code, summary = _run(server, tmp_path)
    finally:
        server.shutdown()
    if shed:
        assert code == 1 and summary["ok_200"] == 0 and summary["shed_503_429"] > 0, summary
        assert summary["failures"] == 0  # shed is reported apart from real failures
        assert "0 answered 200" in (tmp_path / "summary.md").read_text()
    else:
        assert code == 0 and summary["ok_200"] >= 3 and summary["shed_503_429"] == 0, summary
        # + GET /v1/symbols
        assert summary["failures"] == 0 and summary["ok_200"] < summary["requests"]
