"""Service configuration from the environment (prefix ``KRONOS_``), flags or a Serve config.

Every field has a default that gives the embedded service: the bundled model, the
bundled sample store, a local Ray instance, HTTP on 127.0.0.1:8000.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """What one deployment of the service needs to know; picklable, sent to every replica."""

    # extra="forbid": a misspelled key in a Serve config or a flag fails loudly, naming the key.
    # Environment variables are read only for known fields, so other KRONOS_* variables are
    # ignored here; ``kronos serve`` warns about them at start (``unknown_kronos_variables``).
    model_config = SettingsConfigDict(env_prefix="KRONOS_", extra="forbid")

    # -- model and data
    model_dir: str | None = Field(
        None,
        description="checkpoint folder, Hub id, alias (kronos-mini|kronos-small|kronos-base) or a "
                    "folder with "
        "model/ and tokenizer/; default: the bundled model",
    )
    tokenizer_dir: str | None = Field(
        None, description="tokenizer folder or Hub id; default: the model's own"
    )
    model_revision: str | None = Field(
        None, description="Hub revision of the model (branch, tag or commit)"
    )
    dtype: Literal["float32", "bfloat16", "float16", "fp32", "bf16", "fp16"] = Field(
        "float32", description="engine precision: float32 | bfloat16 | float16 (autocast)"
    )
    compile: bool = Field(False, description="torch.compile the engine's decode step")
    cuda_graphs: bool = Field(
        False,
        description="CUDA: capture the engine's decode step as CUDA graphs (torch.compile "
                    "reduce-overhead); "
        "ignored on a CPU, with a log line",
    )
    calibration: str | None = Field(
        None,
        description="calibration JSON from `kronos calibrate`, fitted for this model; corrects the "
                    "quantiles "
        "of every request it covers (horizon and levels), and answers say `calibrated: true`",
    )
    sliding: Literal["exact", "rolling", "recompute"] = Field(
        "exact", description="window past max_context: exact | rolling | recompute"
    )
    price_limits: bool = Field(
        True,
        description="hold the sample paths of symbols with an exchange's daily price limit "
        "(Shanghai, Shenzhen, Beijing; docs/price-limits.md) inside it, step by step; a request "
        "turns it off with price_limits: false; false: off for every request",
    )
    store_dir: str | None = Field(
        None, description="Arrow K-line store; default: the bundled sample store"
    )
    max_context: int | None = Field(
        None, ge=8,
        description="model context in candles (lookback + horizon beyond it slides); default: the "
                    "model's",
    )

    # -- Ray and replicas
    ray_address: str | None = Field(
        None,
        validation_alias=AliasChoices("KRONOS_RAY_ADDRESS", "RAY_ADDRESS", "ray_address"),
        description="running Ray cluster; default: start a local Ray instance",
    )
    app_name: str = Field("kronos", description="Serve application name")
    num_replicas: int | None = Field(
        None, ge=1, description="predictor replicas; default: #GPUs, else 1"
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto | cpu | cuda")
    replica_cpus: float | None = Field(
        None, gt=0,
        description="CPUs per CPU replica (also its torch threads); default: cores / replicas",
    )
    cpu_step_loops: int | None = Field(
        None, ge=1,
        description="CPU replica: step loops that run batches side by side, each on its own "
        "thread with an equal share of the replica's CPUs as torch threads; default: one per CPU "
        "(one torch thread each), and never more loops than CPUs; 1: one loop on all of them",
    )
    cpu_step_loop_mode: Literal["process", "thread"] = Field(
        "process",
        description="CPU replica with more than one step loop: `process` runs each loop in its own "
        "process (a Ray actor on the replica's node), `thread` runs them as threads of the "
        "replica's process, where they share one interpreter lock",
    )
    device_budget_bytes: int | None = Field(
        None, gt=0,
        description="memory one replica may use for its batches (its step loops split it); "
                    "default: 90% of free GPU memory, 2 GiB on CPU",
    )
    max_batch_tokens: int | None = Field(
        None, gt=0,
        description="token budget of one coalesced device batch; default: from the device budget",
    )
    batch_wait_timeout_s: float = Field(
        0.005, ge=0, description="how long a replica waits to coalesce shards"
    )
    max_prefill_tokens: int | None = Field(
        None, ge=0,
        description="history tokens (rows x lookback) one device batch prefills at most, since its "
        "first step cannot be preempted; default: 2,048 on CPU, 32,768 on GPU; 0: no cap",
    )
    max_step_rows: int | None = Field(
        None, ge=0,
        description="continuous batching: rows (series x sample paths) of live batches that share "
        "one decode step at most; default: 20 on CPU, 4,096 on GPU; 0: each batch steps alone",
    )
    share_steps_within_request: bool | None = Field(
        None,
        description="continuous batching: whether batches carrying the same request share a "
        "decode step (else a request's batches decode one after another, each beside other "
        "requests' batches); default: no on CPU, yes on GPU",
    )
    max_skipped: int = Field(
        32, ge=0,
        description="step scheduler: steps of other batches the oldest live batch waits at most, "
        "and scheduler steps a batch that does not fit the memory budget waits before it goes "
        "first",
    )
    gateway_replicas: int = Field(
        1, ge=1,
        description="ingress (gateway) replicas: request parsing, window reads and response "
                    "encoding scale out "
        "over them; they share one metrics folder, so they must run on one node (see "
        "gateway_resource)",
    )
    gateway_resource: str | None = Field(
        None,
        description="custom Ray resource every gateway replica asks 0.001 of, so that they all "
                    "land on the node "
        "that has it (give it to the head node only: `ray start --resources '{\"kronos_gateway\": "
        "1}'`)",
    )
    metrics_dir: str | None = Field(
        None,
        description="folder under which the gateway replicas of a node share their metric files "
        "(prometheus_client multiprocess mode, one sub-folder per app and Ray node); default: the "
        "system temp folder",
    )
    shards_per_replica: int = Field(
        8, ge=1, description="target shards per replica step loop for one request"
    )
    min_shard_tokens: int = Field(
        2048, ge=0,
        description="history tokens (series x lookback x sample_count) a shard holds at least, "
                    "where the request "
        "has that many: a small request goes to one replica whole instead of in slivers to every "
        "replica",
    )
    shards_in_flight_per_replica: int = Field(
        2, ge=1,
        description="shards of one request in flight per replica step loop (a GPU replica has one, "
        "a CPU replica one per CPU; 2: one running, one queued behind it); the rest wait and go "
        "to whichever replica frees up first, which balances the load",
    )

    # -- limits and back-pressure
    max_symbols: int = Field(10_000, ge=1, description="symbols (or inline series) per request")
    max_inflight_requests: int | None = Field(
        None, ge=1,
        description="forecast requests in flight at each gateway replica; beyond: they wait "
                    "(max_queued_requests, queue_wait_s), then 503. Default: from the predictor "
                    "replicas (2 per CPU step loop, 32 per GPU), split over the gateways",
    )
    max_queued_requests: int = Field(
        128, ge=0,
        description="forecast requests waiting for a slot at each gateway replica (their body "
                    "not read yet); beyond: 503 overloaded at once",
    )
    queue_wait_s: float = Field(
        2.0, ge=0,
        description="longest wait for a slot (also bounded by the request's deadline, from "
                    "which it is taken); then 503 overloaded",
    )
    replica_max_ongoing: int = Field(
        16, ge=1, description="shards one replica holds at once (coalescing window)"
    )
    replica_max_queued: int = Field(
        64, ge=1, description="shards queued per replica handle; beyond: 503"
    )
    retry_after_s: int = Field(1, ge=1, description="Retry-After seconds sent with 503/429")
    shard_retries: int = Field(
        3, ge=0, description="re-sends of a shard whose replica died or was past shard_timeout_s"
    )
    shard_timeout_s: float | None = Field(
        None, gt=0,
        description="a shard call unanswered this long, and 3 times as long as the median answer "
                    "of the "
        "request's shards answered so far, gets a copy sent to another replica (the first answer "
        "wins, the other call is cancelled); default: 30 s or the request's deadline / "
        "(shard_retries + 1), whichever is less; off with one replica or shard_retries 0",
    )
    max_body_bytes: int = Field(
        128 * 1024 * 1024, ge=1024,
        description="request body limit in bytes; above it: 413, refused from Content-Length "
                    "before the body is read",
    )
    shutdown_grace_s: float = Field(
        60.0, ge=0,
        description="on SIGTERM/SIGINT: how long in-flight requests may run on while new ones get "
                    "503 (also "
        "Serve's graceful_shutdown_timeout_s); keep the pod's terminationGracePeriodSeconds above "
        "it",
    )
    request_timeout_s: float = Field(
        300.0, gt=0,
        description="forecast deadline in seconds (a client may ask less with X-Kronos-Timeout-S, "
                    "or up to max_request_timeout_s); past it: 504 "
        "and the request's pending shards are cancelled",
    )
    max_request_timeout_s: float | None = Field(
        None, gt=0,
        description="the longest deadline the service grants: X-Kronos-Timeout-S may ask up to it, "
        "and a request without the header that is planned past request_timeout_s is given a "
        "deadline that fits, up to it (the answer's deadline says so); default: "
        "request_timeout_s (no longer deadlines)",
    )
    deadline_check: bool = Field(
        True,
        description="refuse at once (422 deadline_unreachable, before any shard is sent) a "
        "request whose planned time (kronos_core.plan.roofline.forecast_seconds: its series, "
        "paths and steps on the replicas live) is past its deadline by more than deadline_margin; "
        "false: every request runs until its deadline",
    )
    deadline_margin: float = Field(
        1.5, ge=1,
        description="a request is refused only when its planned time exceeds its deadline times "
        "this (the plan is a quiet machine's estimate, within about 0.8-1.4x of the engine's "
        "time on a CPU)",
    )
    min_history_warning: int = Field(
        32, ge=0,
        description="a series with fewer history candles gets a short_history warning (0: never)",
    )

    # -- API keys and rate limits (off unless keys are given; see service/auth.py for the format)
    api_keys: str | None = Field(
        None,
        description="SHA-256-hashed API keys, lines (or ';'-separated) 'sha256 name routes "
                    "series_per_s'; "
        "each of the gateway_replicas gateways enforces series_per_s / gateway_replicas",
    )
    api_keys_file: str | None = Field(
        None, description="file of SHA-256-hashed API keys, same format"
    )
    rate_burst_s: float = Field(
        10.0, gt=0,
        description="a key's rate bucket holds this many seconds of its series/s (its burst)",
    )
    allow_public_without_keys: bool = Field(
        False,
        description="let the service bind a non-loopback host with no API keys (anyone who can "
                    "reach "
        "the port may run forecasts); without it, build_app and `kronos serve` refuse to start so",
    )
    cors_origins: str | None = Field(
        None,
        description="browser origins allowed to call the API (comma-separated, or *); default: "
                    "CORS off, "
        "a preflight gets 204 with no Access-Control-Allow-* header",
    )

    # -- forecast ledger and live accuracy (docs/ledger.md, "In the service")
    ledger_dir: str | None = Field(
        None,
        description="folder of the forecast ledger (every answered forecast, scored once its truth "
                    "is in the "
        "store); default: beside the store (kronos_core.ledger's default); `off` records nothing. "
        "Several gateways or nodes need one shared folder (each gateway writes its own files)",
    )
    ledger_paths: bool = Field(
        False, description="record the sample paths too (large); default: mean and quantiles"
    )
    ledger_retention_days: float | None = Field(
        365.0, ge=0,
        description="ledger days kept (older day partitions are deleted by the scorer); default "
                    "365 (a year of live accuracy; back up to keep more); 0: keep all",
    )
    ledger_retention_bytes: int | None = Field(
        None, gt=0,
        description="ledger size kept (oldest day partitions deleted first); default: no bound",
    )
    ledger_queue: int = Field(
        1024, ge=1,
        description="answered requests waiting for the ledger writer per gateway; beyond: the "
                    "request's rows are "
        "dropped and counted in kronos_ledger_write_failures_total (the forecast never waits for "
        "the disk)",
    )
    ledger_gather_s: float = Field(
        5.0, ge=0,
        description="seconds the ledger writer waits after an answer for more to write into the "
        "same file (a file costs ~15 ms of gateway CPU whatever its size); 0: no wait",
    )
    score_interval_s: float = Field(
        60.0, ge=0,
        description="seconds between background scoring passes in the gateway (one gateway at a "
                    "time, by a lock "
        "file in the ledger folder); 0: no background scoring (`kronos score` still works)",
    )
    score_window_steps: int = Field(
        500, ge=1,
        description="rolling window of the accuracy gauges and /v1/accuracy's `rolling` figures: "
                    "the "
        "latest this many scored steps (by truth time)",
    )

    # -- HTTP
    host: str = Field("127.0.0.1", description="HTTP bind address")
    port: int = Field(8000, ge=0, le=65535, description="HTTP port")
    metrics_port: int | None = Field(
        None, ge=1, le=65535,
        description="serve /metrics on this port of the gateways' node instead (an internal port: "
                    "the public "
        "port's /metrics then answers 404); default: /metrics on the public port",
    )

    # -- logs (docs/operations.md, "Logs")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="the gateway's log lines: text | json (one object a line, with the request id)",
    )
    log_dir: str | None = Field(
        None,
        description="folder the gateways write their log files to (kronos-gateway-<pid>.log); "
                    "default: "
        "the process's stderr (Ray's worker .err files)",
    )

    def predictor_config(self, device: str | None = None):
        """The ``kronos_core.loading.PredictorConfig`` every replica (and the CLI check) builds
        from."""
        from kronos_core.loading import PredictorConfig

        return PredictorConfig(
            model=self.model_dir, tokenizer=self.tokenizer_dir, revision=self.model_revision,
            device=device or ("auto" if self.device == "auto" else self.device), dtype=self.dtype,
            compile=self.compile, cuda_graphs=self.cuda_graphs, sliding=self.sliding,
            max_context=self.max_context,
        )

    def resolved_store_dir(self) -> str:
        if self.store_dir:
            return self.store_dir
        from kronos_core.data.sample_store import default_sample_store

        return str(default_sample_store())

    def resolved_ledger_dir(self) -> str | None:
        """The ledger folder, or None when the ledger is ``off``."""
        if self.ledger_dir is not None and self.ledger_dir.strip().lower() == "off":
            return None
        if self.ledger_dir:
            return self.ledger_dir
        from kronos_core.ledger.ledger import default_ledger_dir

        return str(default_ledger_dir(self.resolved_store_dir()))

    def gateway_shared_dir(self, node_id: str) -> str:
        """The folder the gateway replicas on Ray node ``node_id`` share (metrics, drain marker):
        one per app and node, so that separate Ray instances on one machine never mix."""
        import tempfile
        from pathlib import Path

        root = (
            Path(self.metrics_dir)
            if self.metrics_dir
            else Path(tempfile.gettempdir()) / "kronos-metrics"
        )
        return str(root / f"{self.app_name}-{node_id[:16]}")

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

    def resolved_max_inflight(self, replicas: int, gpu: bool, replica_cpus: float) -> int:
        """Forecast requests in flight at each gateway: the setting, else what keeps the predictor
        replicas busy and no more (more slots than the replicas serve at once only lengthen every
        answer: ``kronos bench overload``, docs/results/overload.md), split over the gateways:
        two requests per step loop of a CPU replica (one running, one queued behind it), 32 per
        GPU replica, whose continuous batching gains from company."""
        if self.max_inflight_requests:
            return self.max_inflight_requests
        if gpu:
            per_replica = INFLIGHT_PER_GPU_REPLICA
        else:
            cpus = max(1, int(replica_cpus))
            per_replica = INFLIGHT_PER_CPU_LOOP * max(1, min(self.cpu_step_loops or cpus, cpus))
        total = per_replica * max(1, replicas)
        return max(1, -(-total // max(1, self.gateway_replicas)))  # ceil

    @property
    def inflight_limit(self) -> int:
        """``max_inflight_requests`` as resolved (``build_app`` resolves it before a gateway
        starts; a gateway built without it, in tests, takes ``UNRESOLVED_INFLIGHT``)."""
        return self.max_inflight_requests or UNRESOLVED_INFLIGHT

    @property
    def longest_timeout_s(self) -> float:
        """The longest deadline a request may get: ``max_request_timeout_s``, never less than
        ``request_timeout_s`` (the default deadline)."""
        return max(self.request_timeout_s, self.max_request_timeout_s or 0.0)

    def resolved_replica_cpus(self, replicas: int) -> float:
        if self.replica_cpus:
            return self.replica_cpus
        return float(max(1, (os.cpu_count() or 1) // max(1, replicas)))


ENV_PREFIX = "KRONOS_"
# Default forecast requests in flight (Settings.resolved_max_inflight): per step loop of a CPU
# replica, per GPU replica, and for a gateway whose settings were not resolved (tests).
INFLIGHT_PER_CPU_LOOP = 2
INFLIGHT_PER_GPU_REPLICA = 32
UNRESOLVED_INFLIGHT = 32

# KRONOS_* variables that are not settings but are read elsewhere, so they never warn. A new
# one goes here (tests/service/test_serve_cli.py checks that every KRONOS_* variable the code
# reads is a setting or listed here).
OTHER_KRONOS_VARIABLES = {
    "KRONOS_HOME": "folder the sample store is built in (kronos_core/data/sample_store.py)",
    "KRONOS_LOAD_SYMBOLS": "load test (locustfile): portfolio size",
    "KRONOS_LOAD_HORIZON": "load test (locustfile): horizon",
    "KRONOS_LOAD_LOOKBACK": "load test (locustfile): lookback",
    "KRONOS_LOAD_WAIT_S": "load test (locustfile): pause between a user's requests",
    "KRONOS_LOAD_TIMEOUT_S": "load test (locustfile): client timeout",
    "KRONOS_API_KEY": "kronos loadtest / kronos soak: the API key they send (--api-key)",
    "KRONOS_WEIGHTS_CACHE": "each node's cache of shipped model weights "
                            "(service/replica/weights.py)",
    "KRONOS_CORPUS": "kronos train default: the training corpus folder (--corpus)",
    "KRONOS_CORPUS_EXTRACT": "scripts/gpu-train.sh: the corpus extract to train from",
    "KRONOS_MALLOC_TUNING": "0: a CPU predictor leaves glibc's allocator as it found it "
                            "(kronos_core/engine/host_memory.py)",
    "KRONOS_TOP_P_ROWS": "0: a CPU's top-p draws run the tensor way, not compiled "
                         "(kronos_core/engine/top_p_rows.py)",
    "KRONOS_NATIVE_ATTENTION": "0: a CPU's causal attention runs torch's kernel, not the "
                               "compiled one (kronos_core/model/native_attention.py)",
    "KRONOS_NATIVE_CACHE": "folder of the compiled CPU attention kernel (default "
                           "~/.cache/kronos/native; kronos_core/model/native_attention.py)",
}


def setting_variables() -> set[str]:
    """Every environment variable a ``Settings`` field is read from (upper case)."""
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(ENV_PREFIX + name.upper())
        if isinstance(field.validation_alias, AliasChoices):
            names.update(a.upper() for a in field.validation_alias.choices
                         if isinstance(a, str) and a.upper().startswith(ENV_PREFIX))
    return names


def unknown_kronos_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One message per ``KRONOS_*`` variable in ``environ`` (default: the process environment)
    that is neither a setting nor in ``OTHER_KRONOS_VARIABLES``, naming the nearest setting:
    ``KRONOS_DEVCIE is not a setting and is ignored (did you mean KRONOS_DEVICE?)``. Names
    are compared in upper case, as pydantic-settings reads them case-insensitively."""
    environ = os.environ if environ is None else environ
    known = setting_variables()
    # compared without the prefix, which every name shares (else any name is "near" every other)
    candidates = {
        name[len(ENV_PREFIX) :]: name for name in sorted(known | set(OTHER_KRONOS_VARIABLES))
    }
    messages = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper in OTHER_KRONOS_VARIABLES:
            continue
        nearest = difflib.get_close_matches(
            upper[len(ENV_PREFIX) :], list(candidates), n=1, cutoff=0.6
        )
        hint = (f" (did you mean {candidates[nearest[0]]}?)" if nearest
                else " (the settings are listed in docs/service.md)")
        messages.append(f"{name} is not a setting and is ignored{hint}")
    return messages


def describe_settings_error(exc: Exception, flags: Mapping[str, str] | None = None) -> str:
    """A pydantic ``ValidationError`` of ``Settings`` as one line per bad value, each naming
    the environment variable (and the flag, from ``flags``: field -> flag) to fix, with no
    pydantic URL: ``KRONOS_SHUTDOWN_GRACE_S (shutdown_grace_s) = 'soon': Input should be a
    valid number``."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    lines = []
    for e in errors(include_url=False):
        loc = e.get("loc") or ("?",)
        field = str(loc[0])
        variable = ENV_PREFIX + field.upper()
        where = (
            f"{variable} ({field}" + (f", {flags[field]}" if flags and field in flags else "") + ")"
        )
        given = e.get("input")
        shown = f" = {given!r}" if isinstance(given, (str, int, float, bool)) else ""
        lines.append(f"{where}{shown}: {e.get('msg', 'invalid')}")
    return "; ".join(lines)
