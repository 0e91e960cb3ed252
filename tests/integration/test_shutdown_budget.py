"""The shutdown budget of ``kronos serve`` (issue 28): with a short grace, SIGTERM during a
request that outlives it. The process exits within the grace + EXIT_MARGIN_S (issue 45), and
the client gets a
coded 503 naming the unanswered symbols, with the forecasts already made kept. The same
service runs with the ledger ``off`` (said once at start; ``/v1/accuracy`` answers a coded
404, never a 500) and with API keys, which ``kronos loadtest`` and ``kronos soak`` without a
key stop on at once with a clear message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from test_shutdown import BIG, ROOT, _free_port, _wait_ready

from service.auth import hash_key

pytestmark = pytest.mark.integration


GRACE_S = 20  # short: the request below outlives it


def test_sigterm_past_the_grace_answers_503_naming_the_unanswered_and_exits_in_time(tmp_path):
    from kronos_core.data.store import KlineStore
    from service.common.settings import Settings

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "KRONOS_API_KEY")}
    env.update(
        PYTHONPATH=str(ROOT), KRONOS_SHUTDOWN_GRACE_S=str(GRACE_S), KRONOS_LEDGER_DIR="off",
        KRONOS_METRICS_DIR=str(tmp_path / "metrics"), KRONOS_API_KEYS=f"{hash_key(BIG)} big * -",
    )
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kronos_core.cli", "serve", "--port", str(port), "--replicas", "1",
         "--device", "cpu", "--replica-cpus", "1"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        # one replica: the lightest service to start
        _wait_ready(url, proc, timeout=780, replicas=1)
        # the ledger is off: /v1/accuracy is a coded error, never a 500
        acc = httpx.get(f"{url}/v1/accuracy", headers={"X-API-Key": BIG}, timeout=60)
        assert acc.status_code == 404 and acc.json()["code"] == "ledger_off", acc.text
        # the load tools stop at once on a 401, saying what to do
        for tool, extra in (
            ("loadtest", ["--requests", "3"]), ("soak", ["--duration", "5", "--warmup", "0"]),
        ):
            run = subprocess.run([sys.executable, "-m", "kronos_core.cli", tool, "--host", url,
                                  "--out", str(tmp_path / tool), *extra],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert run.returncode == 2, (tool, run.stdout[-1500:], run.stderr[-1500:])
            assert (
                "401" in run.stderr and "--api-key" in run.stderr and "KeyError" not in run.stderr
            ), run.stderr
        symbols = KlineStore(Settings().resolved_store_dir()).symbols()[:1000]
        result: dict = {}

        def call():
            with httpx.Client(base_url=url, timeout=400, headers={"X-API-Key": BIG}) as c:
                result["r"] = c.post(
                    "/v1/forecast",
                    json={"symbols": symbols, "lookback": 64, "horizon": 32, "sample_count": 4},
                )

        t = threading.Thread(target=call)
        t.start()
        time.sleep(2.0)
        assert t.is_alive(), "the request finished before the signal: make it bigger"
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=GRACE_S + 60)
        took = time.monotonic() - signalled
        t.join(timeout=60)
        assert code == 0
        # the documented budget (every request ends by the grace, the process by grace +
        # EXIT_MARGIN_S, a watchdog) is shown by what the request got: cut at the grace, 503
        # with the rest named (below); how long the exit took is printed, not asserted (issue 52:
        # no timing in functional tests; proc.wait above bounds a hang)
        r = result["r"]
        assert r.status_code == 503, r.text[:300]
        body = r.json()
        assert body["code"] == "shutting_down" and int(r.headers["Retry-After"]) >= 1
        answered = [f["symbol"] for f in body["forecasts"]]
        assert body["unanswered"], "the request should have outlived the grace"
        # each symbol: answered or named
        assert sorted(answered + body["unanswered"]) == sorted(symbols)
        assert {e["symbol"] for e in body["errors"]} == set(body["unanswered"])
        print(
            f"exit {took:.1f} s after SIGTERM; {len(answered)} answered, {len(body['unanswered'])} "
            "unanswered"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    out = log.read()
    assert out.count("forecast ledger is off") == 1, out[-3000:]  # said once
    assert "will not be applied" not in out  # Ray's misleading http_options line is gone
    for dump in ("Traceback", "*** SIG", "Stack trace", "core dumped", "Fatal Python error"):
        assert dump not in out, out[-3000:]
