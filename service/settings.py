"""Service configuration from the environment (prefix ``KRONOS_``), flags or a Serve config.

Every field has a default that gives the embedded service: the bundled model, the
bundled sample store, a local Ray instance, HTTP on 127.0.0.1:8000.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """What one deployment of the service needs to know; picklable, sent to every replica."""

    model_config = SettingsConfigDict(env_prefix="KRONOS_", extra="ignore")

    # -- model and data
    model_dir: str | None = Field(None, description="Kronos checkpoint folder or Hub id; default: bundled tiny model")
    tokenizer_dir: str | None = Field(None, description="tokenizer folder or Hub id; default: bundled tokenizer")
    store_dir: str | None = Field(None, description="Arrow K-line store; default: the bundled sample store")
    max_context: int = Field(512, ge=8, description="model context in candles (lookback + horizon beyond it slides)")

    # -- Ray and replicas
    ray_address: str | None = Field(
        None,
        validation_alias=AliasChoices("KRONOS_RAY_ADDRESS", "RAY_ADDRESS", "ray_address"),
        description="running Ray cluster; default: start a local Ray instance",
    )
    app_name: str = Field("kronos", description="Serve application name")
    num_replicas: int | None = Field(None, ge=1, description="predictor replicas; default: #GPUs, else 1")
    device: str = Field("auto", description="auto | cpu | cuda")
    replica_cpus: float | None = Field(
        None, gt=0, description="CPUs per CPU replica (also its torch threads); default: cores / replicas"
    )
    device_budget_bytes: int | None = Field(
        None, gt=0, description="memory one replica may use for a batch; default: 90% of free GPU memory, 2 GiB on CPU"
    )
    max_batch_tokens: int | None = Field(
        None, gt=0, description="token budget of one coalesced device batch; default: from the device budget"
    )
    batch_wait_timeout_s: float = Field(0.005, ge=0, description="how long a replica waits to coalesce shards")
    shards_per_replica: int = Field(8, ge=1, description="target shards per replica for one request")
    shards_in_flight_per_replica: int = Field(
        2, ge=1,
        description="shards of one request in flight per replica (2: one running, one queued behind it); the "
        "rest wait and go to whichever replica frees up first, which balances the load",
    )

    # -- limits and back-pressure
    max_symbols: int = Field(10_000, ge=1, description="symbols (or inline series) per request")
    max_inflight_requests: int = Field(32, ge=1, description="forecast requests in flight at the gateway; beyond: 503")
    replica_max_ongoing: int = Field(16, ge=1, description="shards one replica holds at once (coalescing window)")
    replica_max_queued: int = Field(64, ge=1, description="shards queued per replica handle; beyond: 503")
    retry_after_s: int = Field(1, ge=1, description="Retry-After seconds sent with 503/429")
    shard_retries: int = Field(3, ge=0, description="retries of a shard whose replica died")

    # -- HTTP
    host: str = Field("127.0.0.1", description="HTTP bind address")
    port: int = Field(8000, ge=0, le=65535, description="HTTP port")

    def resolved_model_dirs(self) -> tuple[str, str]:
        """(model, tokenizer) locations, defaulting to the bundled checkpoint."""
        if self.model_dir and self.tokenizer_dir:
            return self.model_dir, self.tokenizer_dir
        bundled = Path(__file__).resolve().parent.parent / "kronos_core" / "assets" / "models"
        try:
            import kronos_core

            root = Path(kronos_core.__file__).resolve().parent / "assets" / "models"
            if root.is_dir():
                bundled = root
        except ImportError:  # pragma: no cover - kronos_core is a hard dependency
            pass
        return (
            self.model_dir or str(bundled / "kronos-tiny-model"),
            self.tokenizer_dir or str(bundled / "kronos-tiny-tokenizer"),
        )

    def is_bundled_model(self) -> bool:
        return self.model_dir is None

    def resolved_store_dir(self) -> str:
        if self.store_dir:
            return self.store_dir
        from kronos_core.data.sample_store import default_sample_store

        return str(default_sample_store())

    def resolved_num_replicas(self, num_gpus: int) -> int:
        if self.num_replicas:
            return self.num_replicas
        return num_gpus if (num_gpus > 0 and self.device != "cpu") else 1

    def use_gpu(self, num_gpus: int) -> bool:
        if self.device == "cpu":
            return False
        if self.device == "cuda":
            return True
        return num_gpus > 0

    def resolved_replica_cpus(self, replicas: int) -> float:
        if self.replica_cpus:
            return self.replica_cpus
        return float(max(1, (os.cpu_count() or 1) // max(1, replicas)))
