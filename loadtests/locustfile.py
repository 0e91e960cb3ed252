"""Locust users for the Kronos service.

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000
    kronos loadtest --users 8 --run-time 30s                      # headless, writes a summary

Knobs (environment): KRONOS_LOAD_SYMBOLS (portfolio size, default 50),
KRONOS_LOAD_HORIZON (default 8), KRONOS_LOAD_LOOKBACK (default 128), KRONOS_LOAD_WAIT_S (each
user's pause between requests, "min,max" seconds, default "0.05,0.2"), KRONOS_LOAD_TIMEOUT_S
(client-side timeout of one request, default 330: a hung request is a failure), KRONOS_API_KEY
(sent as ``X-API-Key`` when the service has keys on; ``kronos loadtest --api-key`` sets it).
A 401 or 403 stops the whole run at once (``auth_failure`` holds the service's answer):
every other request would fail the same way.
A shed request (503/429 with ``Retry-After``) makes its user wait that long before its next
request, as a well-behaved client does; ``KRONOS_LOAD_NO_BACKOFF=1`` (``kronos loadtest
--no-backoff``) keeps the careless client that retries after its usual pause, for stress tests.
Outcomes are counted apart: ``outcomes["ok"]`` (a 200 whose answer covers every symbol asked),
``outcomes["shed"]`` (503/429 with Retry-After: the service shedding load as designed). A shed
request is not a success: locust records it as a failure named "shed: ...", so its latency does
not flatter the numbers; ``kronos loadtest`` reports it apart from real failures.
"""

from __future__ import annotations

import os
import random
import time

from locust import HttpUser, between, events, task

from kronos_core.base.errors import ErrorCode

PORTFOLIO = int(os.environ.get("KRONOS_LOAD_SYMBOLS", "50"))
HORIZON = int(os.environ.get("KRONOS_LOAD_HORIZON", "8"))
LOOKBACK = int(os.environ.get("KRONOS_LOAD_LOOKBACK", "128"))
WAIT_S = tuple(float(x) for x in os.environ.get("KRONOS_LOAD_WAIT_S", "0.05,0.2").split(","))
# past the service's 300 s deadline
TIMEOUT_S = float(os.environ.get("KRONOS_LOAD_TIMEOUT_S", "330"))
# a series the service had to give up on: a failed request
LOST_CODES = (ErrorCode.REPLICA_UNAVAILABLE.value,)

API_KEY_VARIABLE = "KRONOS_API_KEY"
NO_BACKOFF_VARIABLE = "KRONOS_LOAD_NO_BACKOFF"  # "1": ignore Retry-After (a careless client)

_universe: list[str] = []
outcomes = {"ok": 0, "shed": 0}
answered_ms: list[float] = []  # the latency of each answered (ok) forecast request
# {"status", "detail"} of the first 401/403: the run stopped on it
auth_failure: dict[str, str] = {}
SHED_PREFIX = "shed: "  # failure messages of shed requests start with it


def key_headers() -> dict[str, str]:
    """The API key header, when ``KRONOS_API_KEY`` is set."""
    key = os.environ.get(API_KEY_VARIABLE)
    return {"X-API-Key": key} if key else {}


@events.test_start.add_listener
def _reset_counts(environment, **_kw):
    outcomes.update(ok=0, shed=0)
    answered_ms.clear()
    auth_failure.clear()


def backoff() -> bool:
    """Whether users honour Retry-After (the default)."""
    return os.environ.get(NO_BACKOFF_VARIABLE, "") not in ("1", "true", "yes")


class PortfolioUser(HttpUser):
    pause = between(*WAIT_S)
    # a request that hangs becomes a failure, not a silent loss at the end
    network_timeout = TIMEOUT_S
    retry_at = 0.0  # time.monotonic() before which a shed user sends nothing (Retry-After)

    def wait_time(self) -> float:
        """The user's pause, and what is left of the last Retry-After when it honours it."""
        return self.pause() + max(0.0, self.retry_at - time.monotonic())

    def on_start(self):
        global _universe
        if not _universe:
            r = self.client.get(
                "/v1/symbols", params={"limit": 5000}, name="/v1/symbols", headers=key_headers()
            )
            if self._refused(r):
                return
            _universe = r.json()["symbols"]

    def _refused(self, r) -> bool:
        """A 401/403: note it and stop the whole run (every request would get the same)."""
        if r.status_code not in (401, 403):
            return False
        if not auth_failure:
            try:
                detail = str(r.json().get("detail", ""))
            except ValueError:
                detail = r.text[:200]
            auth_failure.update(status=str(r.status_code), detail=detail)
        self.environment.runner.quit()
        return True

    def _post(self, body: dict, name: str, accept: str | None = None):
        if not _universe:  # on_start was refused: the run is stopping
            return
        headers = {"Accept": accept, **key_headers()} if accept else key_headers()
        t0 = time.perf_counter()
        with self.client.post(
            "/v1/forecast", json=body, headers=headers, name=name, catch_response=True
        ) as r:
            if self._refused(r):
                r.failure(f"HTTP {r.status_code}: API key refused")
            elif r.status_code in (429, 503) and "Retry-After" in r.headers:
                outcomes["shed"] += 1
                if backoff():
                    try:
                        wait = float(r.headers["Retry-After"])
                    except ValueError:
                        wait = 1.0
                    self.retry_at = time.monotonic() + wait
                r.failure(
                    f"{SHED_PREFIX}HTTP {r.status_code}, Retry-After {r.headers['Retry-After']}"
                )
            elif r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
            elif accept is None and len(r.json()["forecasts"]) + len(
                r.json()["errors"]
            ) != body_size(body):
                r.failure("forecasts + errors != symbols asked")
            elif accept is None and (
                lost := [e for e in r.json()["errors"] if e.get("code") in LOST_CODES]
            ):
                r.failure(
                    f"{len(lost)} series lost: {lost[0]['code']}: "
                    f"{lost[0].get('message', '')[:120]}"
                )
            else:
                outcomes["ok"] += 1
                answered_ms.append((time.perf_counter() - t0) * 1e3)

    @task(8)
    def portfolio_json(self):
        syms = random.sample(_universe, min(PORTFOLIO, len(_universe)))
        self._post({"symbols": syms, "horizon": HORIZON, "lookback": LOOKBACK, "sample_count": 1},
                   "/v1/forecast json")

    @task(2)
    def portfolio_arrow_quantiles(self):
        syms = random.sample(_universe, min(PORTFOLIO, len(_universe)))
        body = {"symbols": syms, "horizon": HORIZON, "lookback": LOOKBACK, "sample_count": 4,
                "quantiles": [0.1, 0.5, 0.9]}
        self._post(body, "/v1/forecast arrow", accept="application/vnd.apache.arrow.stream")


def body_size(body: dict) -> int:
    return len(body.get("symbols") or body.get("series") or [])
