"""A real multi-node Ray cluster on one machine, driven over HTTP (issue 19); run by
``test_multinode.py`` as its own process (``ray.cluster_utils.Cluster`` wants its process to
be the Ray driver, and the integration session's process already has its own Ray).

Head: 0 CPUs, the ``kronos_gateway`` resource (the gateway, Serve's controller and its only
HTTP proxy, ``kronos serve``'s ``HeadOnly``); two worker nodes of 1 CPU each, one predictor
replica each, each with its own weight cache. The model is a copy of the bundled one in a
folder that is renamed away before the replicas start: they can load it only through the
object store. Steps (all requests seeded, 1,000 symbols):

1. ``spread``: both nodes' replicas answer shards;
2. ``fault``: a worker node is removed mid-request; every symbol answered, retries counted,
   the connection kept; ``/readyz`` polled throughout;
3. ``single``: the same request on the one node left (the single-node answer);
4. a new worker node joins: the replica count back to 2 (recovery time), ``/readyz`` says so;
5. ``after``: the same request again, over both nodes;
6. ``/metrics`` totals against what the responses showed.

Prints one JSON object (the figures) on its last line; exits 0 when it ran to the end (the
test asserts on the JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

N_SYMBOLS = 1000
BODY = {"lookback": 64, "horizon": 4, "seed": 7, "sample_count": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(client: httpx.Client, name: str, labels: dict | None = None) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                total += s.value
    return total


def replica_shards(client: httpx.Client) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        for s in fam.samples:
            if s.name == "kronos_batch_shards_total":
                out[s.labels["replica"]] = out.get(s.labels["replica"], 0.0) + s.value
    return out


def replica_on_node(node_id: str):
    """The handle of the Predictor replica actor running on node ``node_id``."""
    import ray

    def where(_actor) -> str:
        return ray.get_runtime_context().get_node_id()

    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["name"].startswith("SERVE_REPLICA::") and "#Predictor#" in a["name"]:
            actor = ray.get_actor(a["name"], namespace=a["namespace"])
            if ray.get(actor.__ray_call__.remote(where), timeout=60) == node_id:
                return actor
    raise AssertionError(f"no Predictor replica on node {node_id}")


class ReadyzPoller(threading.Thread):
    """Polls /readyz every 0.25 s: (seconds since start, status, replicas_ready) or the error."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.samples: list[tuple[float, int | None, object]] = []
        self.t0 = time.monotonic()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=15) as c:
            while not self.stop.is_set():
                t = round(time.monotonic() - self.t0, 2)
                try:
                    r = c.get("/readyz")
                    self.samples.append((t, r.status_code, r.json().get("replicas_ready")))
                except Exception as exc:
                    self.samples.append((t, None, repr(exc)[:120]))
                self.stop.wait(0.25)


def wait_replicas(client: httpx.Client, n: int, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            r = client.get("/readyz", timeout=15)
            if r.status_code == 200 and r.json().get("replicas_ready") == n:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"not {n} replicas after {timeout:.0f} s: {client.get('/readyz').text}")


def forecast(client: httpx.Client, symbols: list[str]) -> tuple[dict, float]:
    t0 = time.monotonic()
    r = client.post("/v1/forecast", json={"symbols": symbols, **BODY})
    if r.status_code != 200:
        raise AssertionError(f"forecast: {r.status_code} {r.text[:300]}")
    return r.json(), time.monotonic() - t0


def means(body: dict) -> dict[str, list]:
    return {f["symbol"]: f["mean"] for f in body["forecasts"]}


def main() -> int:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from kronos_core.loading import default_bundle
    from service import cli
    from service.app import build_app
    from service.common.settings import Settings
    from service.replica.deployment import inject_fault

    work = Path(tempfile.mkdtemp(prefix="kronos-multinode-"))
    out: dict = {"ok": False}
    t_start = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "resources": {"kronos_gateway": 1000},
        # find a dead node in ~3 s instead of ~30 s
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
    })
    try:
        nodes = [
            cluster.add_node(
                num_cpus=1, env_vars={"KRONOS_WEIGHTS_CACHE": str(work / f"cache-{i}")}
            )
            for i in range(2)
        ]
        cluster.connect(namespace="kronos")
        cluster.wait_for_nodes()
        model = work / "driver-model"
        bundle = default_bundle()
        assert bundle is not None
        shutil.copytree(bundle, model)
        settings = Settings(
            model_dir=str(model), device="cpu", num_replicas=2, replica_cpus=1, gateway_replicas=1,
            gateway_resource="kronos_gateway", port=free_port(), shard_retries=5,
            metrics_dir=str(work / "metrics"), request_timeout_s=300,
        )
        settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
        app = build_app(settings)  # ships the weights; the replicas start below
        model.rename(work / "gone")  # no node can read the driver's folder any more
        serve.start(
            proxy_location=cli.PROXY_LOCATION,
            http_options={"host": settings.host, "port": settings.port},
        )
        serve.run(app, name=settings.app_name, route_prefix="/", blocking=False)
        url = f"http://{settings.host}:{settings.port}"
        client = httpx.Client(base_url=url, timeout=600)
        wait_replicas(client, 2, 300)
        out["startup_s"] = round(time.monotonic() - t_start, 1)
        out["proxies"] = sorted(serve.status().proxies)  # node ids of the nodes running a proxy
        assert cluster.head_node is not None
        out["head_node"] = cluster.head_node.node_id
        out["cached_on"] = sorted(
            p.name for p in work.glob("cache-*/*") if not p.name.startswith(".")
        )
        symbols = client.get("/v1/symbols", params={"limit": N_SYMBOLS}).json()["symbols"]
        bodies = []

        spread, out["spread_s"] = forecast(client, symbols)
        bodies.append(spread)
        out["spread_shards_by_replica"] = replica_shards(client)

        # the replica of the node to be removed holds every shard it gets (the test-only fault
        # hook): it has unanswered shards when the node goes, however fast the other one works
        doomed = replica_on_node(nodes[1].node_id)
        ray.get(doomed.__ray_call__.remote(inject_fault, shard_delay_s=120), timeout=60)

        poller = ReadyzPoller(url)
        poller.start()
        result: dict = {}

        def send():
            try:
                result["body"], result["s"] = forecast(client, symbols)
            except Exception as exc:
                result["error"] = repr(exc)

        sender = threading.Thread(target=send)
        sender.start()
        # shards in flight on both nodes: sent (the gateway's shard gauge), and a third of the
        # first request's time in, so that both replicas hold unanswered shards
        deadline = time.monotonic() + 60
        while (
            metric(client, "kronos_queue_depth", {"stage": "shards"}) < 1
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        # the doomed replica has been sent its first shards
        time.sleep(max(1.0, 0.2 * out["spread_s"]))
        t_kill = time.monotonic()
        cluster.remove_node(nodes[1], allow_graceful=False)
        out["removed_at_s"] = round(t_kill - poller.t0, 2)
        sender.join()
        if "error" in result:
            raise AssertionError(f"the request during the node loss failed: {result['error']}")
        fault = result["body"]
        bodies.append(fault)
        out["fault_s"] = round(result["s"], 2)
        out["fault_retries"] = fault["timing"]["shard_retries"]

        wait_replicas(client, 1, 120)  # Serve has seen the loss
        single, out["single_s"] = forecast(client, symbols)
        bodies.append(single)

        t_join = time.monotonic()
        cluster.add_node(num_cpus=1, env_vars={"KRONOS_WEIGHTS_CACHE": str(work / "cache-new")})
        wait_replicas(client, 2, 300)
        # node lost -> 2 of 2 replicas again
        out["recovery_s"] = round(time.monotonic() - t_kill, 1)
        out["rejoin_s"] = round(time.monotonic() - t_join, 1)  # new node added -> its replica ready
        time.sleep(1.0)
        poller.stop.set()
        poller.join()
        out["readyz"] = poller.samples
        out["new_node_cached"] = [
            p.name for p in (work / "cache-new").glob("*") if not p.name.startswith(".")
        ]

        before = replica_shards(client)
        after, out["after_s"] = forecast(client, symbols)
        bodies.append(after)
        out["after_shards_by_replica"] = {
            k: v - before.get(k, 0.0)
            for k, v in replica_shards(client).items()
            if v > before.get(k, 0.0)
        }

        ref = means(spread)
        out["answered"] = [len(b["forecasts"]) for b in bodies]
        out["errors"] = [len(b["errors"]) for b in bodies]
        out["identical"] = [means(b) == ref for b in bodies]
        out["response_series"] = sum(len(b["forecasts"]) for b in bodies)
        out["response_retries"] = sum(b["timing"]["shard_retries"] for b in bodies)
        out["metric_series"] = metric(client, "kronos_series_forecast_total")
        out["metric_retries"] = metric(client, "kronos_shard_retries_total")
        out["model"] = spread["model"]
        out["ok"] = True
        client.close()
    finally:
        out["total_s"] = round(time.monotonic() - t_start, 1)
        try:
            serve.shutdown()
        except Exception:
            pass
        ray.shutdown()
        cluster.shutdown()  # every node this script started, and the cluster address file
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from service.cli import patient_proxy_env

    patient_proxy_env()  # as kronos serve: a loaded machine once failed the proxy's 5 s check
    sys.exit(main())
