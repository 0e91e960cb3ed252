"""The shutdown budget (issue 28): a request still running near the end of the grace is cut.
Its pending shards are cancelled, and it is answered 503 ``shutting_down``. The answer keeps
the forecasts already made and names the unanswered symbols. Replicas are the fakes of
``service_fakes`` (no Ray); tests/integration/test_shutdown.py does it to ``kronos serve``
with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import time

import orjson
import pytest
import yaml
from service_fakes import RoutedReplicas, fake_gateway

from kronos_core.base.errors import ErrorCode
from service.common.schemas import ForecastRequest
from service.lifecycle import DRAIN_MARKER, POD_MARGIN_S, Lifecycle, pod_termination_s, stop_reserve

SYMBOLS = [f"S{i:03d}" for i in range(20)]


def test_the_cut_leaves_a_reserve_of_the_grace_and_the_pod_a_margin_above_it():
    assert stop_reserve(60) == 8 and stop_reserve(12) == 4  # a third of a short grace
    assert (
        pod_termination_s(60) == 60 + POD_MARGIN_S and pod_termination_s(59.5) == 60 + POD_MARGIN_S
    )
    lc = Lifecycle(grace_s=30)
    assert lc.cut_at() is None  # not draining: never cut
    lc.start_drain()
    assert lc.drained_at is not None and lc.cut_at() == lc.drained_at + 30 - 8
    first = lc.drained_at
    lc.start_drain()  # a second drain call does not move the cut
    assert lc.drained_at == first


def test_every_gateway_cuts_at_the_time_the_first_drain_set(tmp_path):
    """The drain marker's mtime is the drain's start for every gateway of the node."""
    first, other = (
        Lifecycle(grace_s=30, shared_dir=tmp_path), Lifecycle(grace_s=30, shared_dir=tmp_path),
    )
    first.start_drain()
    stamp = time.time() - 100
    os.utime(tmp_path / DRAIN_MARKER, (stamp, stamp))  # as if the drain began 100 s ago
    assert other.is_draining() and other.cut_at() == stamp + 30 - 8
    other.start_drain()  # the marker exists: its time stays
    assert (tmp_path / DRAIN_MARKER).stat().st_mtime == stamp
    asyncio.run(asyncio.wait_for(other.wait_cut(), 10))  # past the cut: returns at once


def _answered_then_cut(reps: RoutedReplicas, n: int):
    async def cut():
        while len(reps.answered) < n:
            await asyncio.sleep(0.01)
    return cut


def test_a_cut_request_keeps_its_answered_symbols_and_marks_the_rest_interrupted():
    reps = RoutedReplicas({"fast": 0.005, "stuck": None})  # the stuck replica never answers
    gw, m, _ = fake_gateway(reps, shard_retries=0)  # no re-send: the stuck shards wait for the cut
    gw.dispatcher.cut = _answered_then_cut(reps, 2)
    out = asyncio.run(
        asyncio.wait_for(gw.forecast(ForecastRequest(symbols=SYMBOLS, horizon=2)), 60)
    )
    interrupted = [e["symbol"] for e in out.errors if e["code"] == ErrorCode.INTERRUPTED]
    assert out.symbols and interrupted  # some answered, some cut
    assert sorted(out.symbols + interrupted) == SYMBOLS  # each symbol once: answered or named
    assert all(e["code"] == ErrorCode.INTERRUPTED for e in out.errors)
    assert [i for i, name in reps.cancelled if name == "stuck"]  # the stuck calls were cancelled
    assert len(out.mean) == len(out.symbols)


def test_no_cut_no_change():
    reps = RoutedReplicas({"a": 0.001, "b": 0.001})
    gw, _, _ = fake_gateway(reps)

    async def never():
        await asyncio.Event().wait()

    gw.dispatcher.cut = never
    out = asyncio.run(
        asyncio.wait_for(gw.forecast(ForecastRequest(symbols=SYMBOLS, horizon=2)), 60)
    )
    assert out.symbols == SYMBOLS and out.errors == []


def test_the_route_answers_a_cut_request_503_naming_the_unanswered_symbols():
    pytest.importorskip("ray.serve")
    from service_fakes import fake_future
    from test_app import _ingress

    from service.gateway import ForecastPipeline
    from service.gateway.future import FutureTimestamps

    reps = RoutedReplicas({"fast": 0.005, "stuck": None})
    ing = _ingress(handle=None, shard_retries=0)  # type: ignore[arg-type]
    ing.replicas = reps
    ing.pipeline = ForecastPipeline(
        ing.settings, ing.store, reps, ing.metrics, 2, fit_factory=lambda info, h, sc: lambda L: 3,
        future=FutureTimestamps(fake_future), cut=_answered_then_cut(reps, 2),
    )
    resp = asyncio.run(
        asyncio.wait_for(ing.forecast(ForecastRequest(symbols=SYMBOLS, horizon=2), accept=None), 60)
    )
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "7"
    body = orjson.loads(resp.body)
    assert body["code"] == "shutting_down" and "send them again" in body["detail"]
    answered = [f["symbol"] for f in body["forecasts"]]
    assert answered and body["unanswered"] and sorted(answered + body["unanswered"]) == SYMBOLS
    assert {e["code"] for e in body["errors"]} == {"interrupted"}
    assert (
        ing.metrics.registry.get_sample_value("kronos_errors_total", {"code": "shutting_down"}) == 1
    )


def test_the_manifest_termination_period_is_derived_from_the_grace():
    """Every pod of the KubeRay manifest: terminationGracePeriodSeconds = the Serve config's
    shutdown_grace_s + POD_MARGIN_S (the real file)."""
    from pathlib import Path

    from service.common.settings import Settings

    path = Path(__file__).resolve().parents[2] / "deploy" / "kuberay-rayservice.yaml"
    (service,) = [
        d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "RayService"
    ]
    args = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    grace = Settings(**args).shutdown_grace_s
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]
    ]
    assert [p["terminationGracePeriodSeconds"] for p in pods] == [pod_termination_s(grace)] * len(
        pods
    )
