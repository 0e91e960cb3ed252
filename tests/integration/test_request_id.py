"""One request id end to end (issue 28), on the live service: the id in the response's
``X-Request-Id`` header is the answer's ``request_id``, its rows' ``request_id`` in the
forecast ledger, and the ``request_id`` of its JSON access line in the gateway log
(``KRONOS_LOG_FORMAT=json``, ``KRONOS_LOG_DIR``). A caller's own ``X-Request-Id`` is kept;
without one, the id Serve's proxy made is the one used throughout."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _ledger_ids(folder: str) -> set[str]:
    from kronos_core.ledger.ledger import Ledger

    table = Ledger(folder).read()
    return set(table["request_id"].to_pylist()) if table.num_rows else set()


def _access_lines(folder: str, rid: str) -> list[dict]:
    lines = []
    for path in Path(folder).glob("kronos-gateway-*.log"):
        for text in path.read_text().splitlines():
            line = json.loads(text)  # every line is one JSON object
            if line.get("request_id") == rid and line["logger"] == "service.access":
                lines.append(line)
    return lines


def _wait_for(check, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} never appeared"
        time.sleep(0.25)
    return found


@pytest.mark.parametrize("own_id", [True, False], ids=["caller-id", "proxy-id"])
def test_one_id_in_header_body_ledger_row_and_json_log_line(live_service, own_id):
    symbols = live_service.store.symbols()[:3]
    headers = {"X-Request-Id": f"it-{uuid.uuid4()}"} if own_id else {}
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": symbols, "lookback": 32, "horizon": 2}, headers=headers
    )
    assert r.status_code == 200, r.text[:300]
    rid = r.headers["X-Request-Id"]
    if own_id:
        assert rid == headers["X-Request-Id"]  # the caller's own id is kept
    assert r.json()["request_id"] == rid
    settings = live_service.settings
    _wait_for(lambda: rid in _ledger_ids(settings.ledger_dir), f"ledger rows of {rid}")
    (line,) = _wait_for(lambda: _access_lines(settings.log_dir, rid), f"the access line of {rid}")
    assert (line["method"], line["route"], line["status"], line["symbols"]) == (
        "POST", "/v1/forecast", 200, 3,
    )
    assert line["duration_ms"] > 0 and line["timing"]["series"] == 3.0 and line["level"] == "info"
