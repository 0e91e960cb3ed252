"""Two gateway (ingress) replicas share their metrics: requests answered by either gateway are
counted exactly once, and ``/metrics`` answers the same totals whichever gateway serves it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

OK = {"route": "/v1/forecast", "method": "POST", "status": "200"}
TOTALS = {  # metric sample -> labels it must carry
    "kronos_request_duration_seconds_count": OK,
    "kronos_series_forecast_total": {},
    "kronos_tokens_generated_total": {},
    "kronos_errors_total": {"code": "unknown_symbol"},
}


def _value(text: str, name: str, labels: dict) -> float:
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _totals_from_each_gateway(
    svc, gateways: int = 2, timeout: float = 60
) -> dict[str, dict[str, float]]:
    """The counters as each gateway replica answers them on /metrics (scraped until all
    answered)."""
    seen: dict[str, dict[str, float]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gw, text = svc.scrape()
        seen[gw] = {name: _value(text, name, labels) for name, labels in TOTALS.items()}
        if len(seen) == gateways:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"/metrics answered by {sorted(seen)} only in {timeout} s of scrapes")


def _running_gateways(svc) -> int:
    from ray import serve

    app = serve.status().applications.get(svc.settings.app_name)
    dep = app.deployments.get("Gateway") if app else None
    return 0 if dep is None else int(sum(n for s, n in dep.replica_states.items()
                                         if str(getattr(s, "value", s)) == "RUNNING"))


def _tokens(req: dict, body: dict) -> int:
    return sum(req.get("sample_count", 1) * len(f["timestamps"]) for f in body["forecasts"])


def test_metric_totals_over_two_gateways_equal_the_requests_sent(live_service):
    svc = live_service
    assert svc.settings.gateway_replicas == 2
    svc.settle()  # idle; every replica's batch reports are in
    before = next(iter(_totals_from_each_gateway(svc).values()))
    symbols = svc.store.symbols()
    reqs = [
        {
            "symbols": symbols[60 + 3 * i : 63 + 3 * i] + [f"NOPE{i}"], "lookback": 32,
            "horizon": 2 + i % 3, "sample_count": 1 + i % 2, "seed": i,
        }
        for i in range(12)
    ]

    def post(req):
        with httpx.Client(base_url=svc.url, timeout=300) as c:
            return c.post("/v1/forecast", json=req)

    with ThreadPoolExecutor(3) as pool:  # concurrent: Serve's proxy spreads them over both gateways
        responses = list(pool.map(post, reqs))
    assert all(r.status_code == 200 for r in responses), [
        r.text[:200] for r in responses if r.status_code != 200
    ]
    answered_by = {r.headers["X-Kronos-Gateway"] for r in responses}
    assert len(answered_by) == 2, (
        f"all {len(reqs)} requests went to {answered_by}: not a two-gateway check"
    )
    answered = list(zip(reqs, [r.json() for r in responses]))
    # batch reports travel with a replica's next answer; these requests count too
    flush = svc.settle()
    answered += [({"sample_count": 1}, body) for body in flush]

    after = _totals_from_each_gateway(svc)
    first, second = after.values()
    assert first == second, f"the gateways disagree on the totals: {after}"
    delta = {name: first[name] - before[name] for name in TOTALS}
    assert delta["kronos_request_duration_seconds_count"] == len(reqs) + len(flush)
    assert delta["kronos_series_forecast_total"] == sum(len(b["forecasts"]) for _, b in answered)
    assert delta["kronos_tokens_generated_total"] == sum(_tokens(q, b) for q, b in answered)
    assert delta["kronos_errors_total"] == sum(len(b["errors"]) for _, b in answered) == len(reqs)
    # work in flight is summed over the gateways too, and is back to zero
    assert svc.metric("kronos_queue_depth", {"stage": "requests"}) == 0
    assert svc.metric("kronos_http_requests_in_flight") == 0


def test_a_killed_gateway_loses_no_counts(live_service):
    """Counters live in the killed process's files: the survivor still reports them, and Serve's
    replacement gateway adds to them."""
    import ray

    svc = live_service
    svc.settle()
    before = next(iter(_totals_from_each_gateway(svc).values()))
    gateways = svc.gateway_actors()
    assert len(gateways) == 2, gateways
    namespace, name = gateways[0]
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    deadline = time.monotonic() + 180  # Serve starts a replacement
    while not (len(current := svc.gateway_actors()) == 2 and (namespace, name) not in current
               and _running_gateways(svc) == 2):
        assert time.monotonic() < deadline, f"no replacement gateway running after 180 s: {current}"
        time.sleep(0.5)
    svc.wait_ready(2, timeout=180)
    after = _totals_from_each_gateway(svc)
    assert name.rsplit("#", 1)[-1] not in after
    for gw, totals in after.items():
        for metric in ("kronos_request_duration_seconds_count", "kronos_series_forecast_total",
                       "kronos_tokens_generated_total"):
            assert totals[metric] == before[metric], (
                f"{gw}: {metric} {totals[metric]} != {before[metric]}"
            )
    r = svc.client.post(
        "/v1/forecast", json={"symbols": svc.store.symbols()[:4], "lookback": 32, "horizon": 2}
    )
    assert r.status_code == 200 and len(r.json()["forecasts"]) == 4
    assert svc.metric("kronos_series_forecast_total") == before["kronos_series_forecast_total"] + 4
