"""Draining at the gateway (new work: 503 shutting_down; probes stay open; requests in
flight counted) and the KubeRay manifest's grace periods matching the setting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.common.settings import Settings
from service.lifecycle import DrainMiddleware, Lifecycle

ROOT = Path(__file__).resolve().parents[2]


def _app(state: Lifecycle, seen: list[int]):
    app = FastAPI()
    app.add_middleware(DrainMiddleware, state=state)

    @app.get("/work")
    async def work():
        seen.append(state.active)  # counted while it runs
        await asyncio.sleep(0)
        return {"ok": True}

    @app.get("/readyz")
    async def readyz():
        return {"ready": not state.draining}

    return app


def test_draining_refuses_new_work_and_keeps_probes_open():
    state, seen = Lifecycle(retry_after_s=7), []
    client = TestClient(_app(state, seen))
    assert client.get("/work").json() == {"ok": True} and seen == [1] and state.active == 0
    state.draining = True
    r = client.get("/work")
    assert (
        r.status_code == 503
        and r.json()["code"] == "shutting_down"
        and r.headers["Retry-After"] == "7"
    )
    assert seen == [1]  # the route did not run
    assert client.get("/readyz").json() == {"ready": False}


def test_kuberay_grace_period_covers_the_shutdown_grace_setting():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "kuberay-rayservice.yaml").read_text()))
    service = docs[0]
    args = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    settings = Settings(**args)  # extra="forbid": every key is a real setting
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]
    ]
    for pod in pods:
        assert pod["terminationGracePeriodSeconds"] > settings.shutdown_grace_s
