"""A request planned past its deadline, over HTTP against the live service (issue 53): refused at
once with 422 ``deadline_unreachable`` naming the estimate, the deadline and what would fit,
nothing sent to a replica; ``KronosClient`` raises the same words; a request that fits runs and
its answer gives its deadline and planned seconds. The decision's rules are unit-tested in
tests/service/gateway/test_deadline.py; the explorer's message in test_ui_browser.py."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration

# 1,000 sample-store symbols at lookback 240, 16 steps and the bundled default's 32 paths: about
# 100 s planned on the session's two CPU replicas (more on a loaded machine), against 1 s
BIG = {"lookback": 240, "horizon": 16, "sample_count": 32}


def test_a_request_planned_past_its_deadline_is_refused_at_once(live_service):
    live_service.wait_ready(2, timeout=120)
    live_service.wait_idle()
    symbols = live_service.store.symbols()[:1000]
    refused0 = live_service.metric("kronos_errors_total", {"code": "deadline_unreachable"})
    t0 = time.monotonic()
    r = live_service.client.post("/v1/forecast", json={"symbols": symbols, **BIG},
                                 headers={"X-Kronos-Timeout-S": "1"})
    took = time.monotonic() - t0
    assert r.status_code == 422, r.text[:500]
    body = r.json()
    assert body["code"] == "deadline_unreachable"
    (entry,) = body["detail"]
    assert entry["loc"] == ["header", "x-kronos-timeout-s"]
    assert entry["type"] == "deadline_unreachable"
    plan = body["plan"]
    assert plan["deadline_s"] == 1.0 and plan["deadline_source"] == "request"
    assert (plan["series"], plan["sample_count"], plan["horizon"]) == (1000, 32, 16)
    # two replicas of one step loop each (one, were a replica being replaced just now)
    assert plan["lanes"] in (1, 2) and plan["device"] == "cpu"
    assert plan["planned_s"] > plan["margin"] * plan["remaining_s"]
    assert plan["fits"]["timeout_s"] > 1 and plan["fits"]["symbols"] < 1000
    msg = entry["msg"]
    assert msg.startswith("planned ")
    for words in ("1000 symbols x 32 sample paths x 16 steps",
                  "deadline of 1 s (X-Kronos-Timeout-S)", "refused before any work",
                  f"X-Kronos-Timeout-S: {plan['fits']['timeout_s']} or more"):
        assert words in msg, (words, msg)
    # nothing was sent: no shard in flight at the gateways, no replica holding one
    assert live_service.metric("kronos_queue_depth", {"stage": "shards"}) == 0
    assert not any(live_service.replica_ongoing().values())
    assert live_service.metric("kronos_errors_total", {"code": "deadline_unreachable"}) == (
        refused0 + 1)
    print(f"refused in {took:.3f} s: {msg}")  # a figure, not a limit (tests do not time)
    # the same plan says the symbols it offers fit: not refused (run, or late on a loaded machine)
    fits = plan["fits"]["symbols"]
    if fits:
        r = live_service.client.post("/v1/forecast", json={"symbols": symbols[:fits], **BIG},
                                     headers={"X-Kronos-Timeout-S": "1"})
        assert r.status_code in (200, 504), r.text[:500]
    schema = live_service.client.get("/openapi.json").json()
    unprocessable = schema["paths"]["/v1/forecast"]["post"]["responses"]["422"]
    assert "deadline_unreachable" in unprocessable["description"]


def test_a_request_that_fits_runs_and_says_its_plan(live_service):
    live_service.wait_ready(2, timeout=120)
    symbols = live_service.store.symbols()[:3]
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": symbols, "lookback": 32, "horizon": 2, "sample_count": 1},
        headers={"X-Kronos-Timeout-S": "60"},
    )
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert [f["symbol"] for f in body["forecasts"]] == symbols
    deadline = body["deadline"]
    assert deadline["source"] == "request" and deadline["seconds"] == 60.0
    assert deadline["planned_s"] is not None and deadline["note"] == ""
    # without the header: the service's default deadline
    r = live_service.client.post(
        "/v1/forecast", json={"symbols": symbols, "lookback": 32, "horizon": 2, "sample_count": 1})
    assert r.status_code == 200 and r.json()["deadline"]["source"] == "default"
    assert r.json()["deadline"]["seconds"] == live_service.settings.request_timeout_s


def test_the_python_client_raises_the_services_words(live_service):
    from kronos_core.client import KronosClient, KronosServiceError

    live_service.wait_ready(2, timeout=120)
    symbols = live_service.store.symbols()[:1000]
    client = KronosClient(live_service.url, deadline_s=1, max_retries=0)
    with pytest.raises(KronosServiceError) as caught:
        client.forecast(symbols, 16, lookback=240, sample_count=32)
    err = caught.value
    assert (err.status, err.code) == (422, "deadline_unreachable")
    assert err.message.startswith("planned ") and "refused before any work" in err.message
    assert err.plan is not None and err.plan["series"] == 1000 and "fits" in err.plan
    # a request that fits, with a deadline a loaded machine meets too
    out = KronosClient(live_service.url, deadline_s=60).forecast(symbols[:2], 2, lookback=32,
                                                               sample_count=1)
    assert list(out.frame["symbol"].unique()) == symbols[:2]
