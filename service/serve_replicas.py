"""The predictor replicas behind a Ray Serve handle, as the gateway's ``Replicas``
(``service.common.interfaces``): Ray's failures become the service's own errors, a dead replica
``ReplicaGone`` (the gateway retries the shard) and full queues ``Overloaded`` (503)."""

from __future__ import annotations

import asyncio

from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from service.common.errors import Overloaded, ReplicaGone
from service.common.messages import ReplicaInfo, Shard, ShardResult
from service.common.metrics import Metrics
from service.common.settings import Settings


class ServeReplicas:
    """``forecast_shard`` and ``describe`` through the Serve handle of the Predictor deployment."""

    def __init__(self, handle: DeploymentHandle, settings: Settings, metrics: Metrics):
        self.handle = handle
        self.settings = settings
        self.metrics = metrics

    async def forecast_shard(self, shard: Shard) -> ShardResult:
        resp = self.handle.forecast_shard.remote(shard)
        try:
            return await resp
        except asyncio.CancelledError:
            resp.cancel()  # client gone: drop the shard where Ray still can
            raise
        except BackPressureError as exc:
            raise Overloaded(
                f"replicas' queues are full: {exc}", self.settings.retry_after_s
            ) from exc
        except RayActorError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            raise ReplicaGone(f"{type(exc).__name__}: {first_line}") from exc

    async def describe(self) -> ReplicaInfo:
        for attempt in range(self.settings.shard_retries + 1):
            try:
                return await self.handle.describe.remote()
            except RayActorError:
                if attempt == self.settings.shard_retries:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")
