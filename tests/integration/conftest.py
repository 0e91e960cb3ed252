"""One real Ray Serve app for the whole integration session: local Ray (started once),
the bundled model, the bundled sample store (``KRONOS_STORE_DIR`` overrides it), two CPU
predictor replicas and real HTTP on a free loopback port."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx
import pytest

from service.settings import Settings


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


@pytest.fixture(scope="session")
def live_service():
    import ray

    from kronos_core.data.store import KlineStore
    from service.cli import start, stop

    settings = Settings().model_copy(update=dict(
        num_replicas=2, replica_cpus=1, device="cpu", port=free_port(),
        max_inflight_requests=4,  # small, so that the overload test can reach it
        shard_retries=5,
        # every shard of a request in flight at once (the default pulls two per replica), so that
        # the replica-kill test finds shards queued on the replica it kills
        shards_in_flight_per_replica=64,
    ))
    settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="kronos-tests")
    url = start(settings)
    client = httpx.Client(base_url=url, timeout=300)
    svc = LiveService(url, settings, KlineStore(settings.store_dir), client)
    try:
        svc.wait_ready(2)
        yield svc
    finally:
        client.close()
        if started_ray:
            stop()  # serve.shutdown() + ray.shutdown()
        else:
            from ray import serve

            serve.shutdown()
