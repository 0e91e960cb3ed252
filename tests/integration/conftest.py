"""One real Ray Serve app for the whole integration session: local Ray (started once),
the bundled model, the bundled sample store (``KRONOS_STORE_DIR`` overrides it), two CPU
predictor replicas with the default dispatch settings, TWO gateway (ingress) replicas sharing
their metrics, and real HTTP on a free loopback port. Every test goes through both gateways
(Serve's proxy spreads the requests), so every metric check also checks the shared metrics.

Tests do not assume what an earlier test left behind: ``LiveService.settle()`` waits until no
shard is queued or running anywhere and every replica has handed over its batch reports."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx
import pytest

from service.common.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveService:
    url: str
    settings: Settings
    store: object  # kronos_core.data.store.KlineStore on the same folder
    client: httpx.Client

    def metric(self, name: str, labels: dict | None = None) -> float:
        """A sample's value from the service's own /metrics (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.client.get("/metrics").text
        total = None
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                    total = (total or 0.0) + s.value
        return total or 0.0

    def scrape(self) -> tuple[str, str]:
        """(gateway replica that answered, /metrics text)."""
        r = self.client.get("/metrics")
        assert r.status_code == 200, r.text[:300]
        return r.headers["X-Kronos-Gateway"], r.text

    def replica_actors(self) -> list[tuple[str, str]]:
        return predictor_replica_actors()

    def gateway_actors(self) -> list[tuple[str, str]]:
        return serve_replica_actors("Gateway")

    def replica_ongoing(self) -> dict[str, int]:
        """Requests each live Predictor replica is holding (running or queued), asked of the
        replica actors themselves, by replica id (the ``replica`` label of the metrics)."""
        import ray

        out = {}
        for namespace, name in predictor_replica_actors():
            actor = ray.get_actor(name, namespace=namespace)
            out[name.rsplit("#", 1)[-1]] = int(
                ray.get(actor.get_num_ongoing_requests.remote(), timeout=60)
            )
        return out

    def wait_idle(self, timeout: float = 300.0) -> None:
        """Until no request or shard is in flight at the gateway and every replica holds nothing."""
        deadline = time.monotonic() + timeout
        while True:
            busy = {k: v for k, v in self.replica_ongoing().items() if v}
            busy.update({f"gateway {stage}": n for stage in ("requests", "shards")
                         if (n := self.metric("kronos_queue_depth", {"stage": stage}))})
            if not busy:
                return
            assert time.monotonic() < deadline, f"service still busy after {timeout}s: {busy}"
            time.sleep(0.2)

    def settle(self, replicas: int = 2) -> list[dict]:
        """Idle service whose metrics are complete: a replica hands its batch reports over with
        its next result, so small requests are sent until every live replica has answered one.
        Returns those requests' response bodies (their work is in the metrics too)."""
        self.wait_ready(replicas, timeout=180)
        self.wait_idle()
        ids = list(self.replica_ongoing())
        before = {i: self.metric("kronos_batch_shards_total", {"replica": i}) for i in ids}
        bodies = []
        # 64 symbols x lookback 128: four shards (min_shard_tokens keeps smaller requests whole, on
        # one replica); the router places each on the replica with the fewest tokens in flight
        symbols = self.store.symbols()[:64]
        for _ in range(20):
            r = self.client.post(
                "/v1/forecast",
                # one path: callers count the flush's tokens (the model's default is 32 paths)
                json={"symbols": symbols, "lookback": 128, "horizon": 2, "seed": 0,
                      "sample_count": 1},
            )
            assert r.status_code == 200, r.text[:300]
            bodies.append(r.json())
            if all(
                self.metric("kronos_batch_shards_total", {"replica": i}) > before[i] for i in ids
            ):
                self.wait_idle()
                return bodies
        raise AssertionError(f"replicas {ids} did not all answer 20 flush requests")

    def wait_ready(self, replicas: int, timeout: float = 90.0) -> dict:
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            try:
                r = self.client.get("/readyz", timeout=15)
                last = r.json()
                if r.status_code == 200 and last.get("replicas_ready", 0) >= replicas:
                    return last
            except httpx.HTTPError as exc:
                last = {"error": repr(exc)}
            time.sleep(0.5)
        raise TimeoutError(f"service not ready with {replicas} replicas after {timeout}s: {last}")


def predictor_replica_actors() -> list[tuple[str, str]]:
    """(namespace, name) of the live Predictor replica actors (Serve names them
    ``SERVE_REPLICA::<app>#Predictor#<replica id>``)."""
    return serve_replica_actors("Predictor")


def serve_replica_actors(deployment: str) -> list[tuple[str, str]]:
    """(namespace, name) of the live replica actors of a deployment (Predictor, Gateway)."""
    import ray

    names = ray.util.list_named_actors(all_namespaces=True)
    return [(a["namespace"], a["name"]) for a in names
            if a["name"].startswith("SERVE_REPLICA::") and f"#{deployment}#" in a["name"]]


def init_ray(attempts: int = 3) -> None:
    """``ray.init`` for the tests, retried: on a loaded machine the raylet can miss Ray's fixed
    30 s registration window ("The current node timed out during startup")."""
    import ray

    from service.cli import patient_proxy_env

    patient_proxy_env()  # before Ray starts, as kronos serve does
    for attempt in range(1, attempts + 1):
        try:
            # 3 logical CPUs: the shared app's two replicas take one each; the third is for a small
            # app a test deploys beside it (tests/integration/test_ledger_service_week.py). Threads
            # are set per replica.
            ray.init(
                num_cpus=3, include_dashboard=False, log_to_driver=False, namespace="kronos-tests"
            )
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            ray.shutdown()
            time.sleep(10)


@pytest.fixture(scope="session")
def live_service(tmp_path_factory):
    import ray

    from kronos_core.data.store import KlineStore
    from service.cli import start, stop

    settings = Settings().model_copy(update=dict(
        num_replicas=2, replica_cpus=1, device="cpu", port=free_port(),
        # metrics summed over both gateways (prometheus_client multiprocess files)
        gateway_replicas=2,
        metrics_dir=str(tmp_path_factory.mktemp("gateway-metrics")),
        ledger_dir=str(tmp_path_factory.mktemp("ledger")),  # not beside the shared sample store
        # the gateways' JSON log lines in files a test reads (tests/integration/test_request_id.py)
        log_format="json", log_dir=str(tmp_path_factory.mktemp("gateway-logs")),
        max_inflight_requests=4,  # per gateway; small, so that the overload test can reach it
        max_queued_requests=2,  # and its queue (service.admission), which the test fills too
        shard_retries=5,
        # dispatch (shards_per_replica, shards_in_flight_per_replica, batching) stays at the
        # defaults
    ))
    settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
    started_ray = not ray.is_initialized()
    if started_ray:
        init_ray()
    url = start(settings)
    client = httpx.Client(base_url=url, timeout=300)
    svc = LiveService(url, settings, KlineStore(settings.store_dir), client)
    try:
        svc.wait_ready(2, timeout=300)
        yield svc
    finally:
        client.close()
        if started_ray:
            stop(settings)  # the app, then Ray
        else:
            from ray import serve

            serve.shutdown()
