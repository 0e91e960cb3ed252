"""The replica's batching policy: every "how big, and when" figure of the work on one device, in
one place. The step scheduler (``service.replica.scheduler``) takes every decision with these
figures and the step runner (``service.replica.step_runner``) carries the decisions out.

- **Merging**: shards that arrive within ``batch_wait_timeout_s`` of the first waiting one, with
  the same options (and calibration), form one batch of at most ``max_batch_tokens`` tokens.
- **Prefill cap**: a batch holds at most ``max_prefill_tokens`` history tokens (rows x lookback),
  because its first step (tokenize and prefill the whole history) cannot be preempted.
- **Shared decode steps** (continuous batching): the batch the scheduler picks runs its decode
  step together with other live batches, least remaining work first, while the step holds at
  most ``max_step_rows`` rows; each batch's paths are what it gives alone. On a CPU the batches
  of one request do not share a step with each other (``share_within_request``): a big request's
  batches decode one after another, and a small request's batch rides beside the one decoding.
- **Admission**: batches start while the memory model says they fit ``budget_bytes`` together;
  a waiting one is first after ``max_skipped`` scheduler steps, and the oldest live one runs at
  least one step in every ``max_skipped + 1`` (the scheduler's aging).
- **Out-of-memory splitting**: a batch that runs out of memory is halved and both halves queued,
  down to one series; one series that does not fit fails its shard.

Every knob is a ``Settings`` field (docs/service.md, "Configuration", has the CPU and GPU
defaults); ``max_batch_tokens``, ``batch_wait_timeout_s``, ``max_prefill_tokens`` and
``max_step_rows`` can also be changed live through the Serve ``user_config``
(``Predictor.reconfigure``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.common.settings import Settings
from service.replica.scheduler import DEFAULT_MAX_SKIPPED, joining

# History tokens one batch may prefill, per device kind, when the setting is unset. CPU: a prefill
# of 2,048 tokens is about 50 ms on one core, so a small request waits for at most that; GPU: small
# batches waste a GPU, and its prefill of 32,768 tokens is milliseconds (an estimate from the
# model's FLOPs). The measurements behind the CPU figure: docs/results/mixed.md.
DEFAULT_MAX_PREFILL_TOKENS = {"cpu": 2048, "cuda": 32768}
# Rows one shared decode step holds at most, per device kind, when the setting is unset. CPU: 20,
# so a small job's step carries one 10-row job of a big request at most: its latency grows by a
# few milliseconds a step, and the big request's job steps with it for a fraction of its own
# step's cost (a decode step of a few rows is mostly per-step overhead on a CPU). Jobs with equal
# sampling options draw their tokens together too (kronos_core.engine.job), which is what made
# sharing pay: kronos bench mixed, the big request with a small one every second, median 1.105
# (one replica) and 1.088 (two) at 20 against 1.13-1.24 at 0; the small request beside it
# 0.34-0.39 s against 0.28-0.35 s (docs/results/mixed.md). GPU: a step's cost hardly grows
# with rows; the cap bounds the step's working memory.
DEFAULT_MAX_STEP_ROWS = {"cpu": 20, "cuda": 4096}
CPU_DEFAULT_BUDGET = 2 << 30  # bytes a CPU replica plans its batches for, when the setting is unset
GPU_BUDGET_SHARE = 0.9  # of the free GPU memory at start, when the setting is unset
# a batch of this many series or fewer is not halved on out-of-memory: its shard fails
MIN_SPLIT = 1


# Whether the jobs of one request share decode steps with each other, per device kind, when the
# setting is unset. CPU: no. A step's cost there grows with its rows, and two parts of a big request
# stepping together fill the step: a small request's job that arrives then pushes one of them out,
# and the step it loses costs the machine a whole step's fixed cost (~3 ms more per small step than
# riding beside one part, measured offline with 10-row parts). So a big request's parts decode one
# after another, and a small job rides beside the one decoding. GPU: yes; a step's cost hardly
# grows with rows, so a big request's parts step together.
DEFAULT_SHARE_WITHIN_REQUEST = {"cpu": False, "cuda": True}


def default_share_within_request(device: str) -> bool:
    return DEFAULT_SHARE_WITHIN_REQUEST[device_kind(device)]


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def default_max_prefill_tokens(device: str) -> int:
    return DEFAULT_MAX_PREFILL_TOKENS[device_kind(device)]


def default_max_step_rows(device: str) -> int:
    return DEFAULT_MAX_STEP_ROWS[device_kind(device)]


@dataclass(frozen=True)
class BatchingPolicy:
    """The limits one replica batches by (see the module docstring)."""

    max_batch_tokens: int = 1 << 62  # merging: tokens (rows x (lookback + horizon)) of one batch
    batch_wait_timeout_s: float = 0.0  # merging: how long the first waiting shard waits for others
    max_prefill_tokens: int | None = None  # prefill cap: history tokens of one batch (None: no cap)
    budget_bytes: int = 1 << 62  # admission: device memory the live batches may hold together
    # admission and aging: steps (or scheduler steps) a batch waits at most for others
    max_skipped: int = DEFAULT_MAX_SKIPPED
    # shared decode steps: rows of one step at most (0: each batch steps alone)
    max_step_rows: int = 0
    # shared decode steps: whether jobs carrying the same request may share one (False: a
    # request's jobs decode one after another, each beside other requests' jobs)
    share_within_request: bool = True
    min_split: int = MIN_SPLIT  # out-of-memory: batches of at most this many series are not halved

    @classmethod
    def for_replica(
        cls,
        settings: Settings,
        device: str,
        budget_bytes: int,
        default_batch_tokens: int,
        user_config: Mapping[str, Any] | None = None,
    ) -> BatchingPolicy:
        """The policy of a replica on ``device``: the settings, the device's defaults where a
        setting is unset, and the live ``user_config`` over both."""
        live = dict(user_config or {})
        tokens = live.get("max_batch_tokens") or settings.max_batch_tokens or default_batch_tokens
        wait = live.get("batch_wait_timeout_s", settings.batch_wait_timeout_s)
        if "max_prefill_tokens" in live:  # live: 0 or None, no cap
            prefill = live["max_prefill_tokens"]
        else:  # the setting: None, the device's default; 0, no cap
            prefill = settings.max_prefill_tokens
            prefill = default_max_prefill_tokens(device) if prefill is None else prefill
        if "max_step_rows" in live:  # live: 0 or None, no sharing
            step_rows = live["max_step_rows"]
        else:  # the setting: None, the device's default; 0, no sharing
            step_rows = settings.max_step_rows
            step_rows = default_max_step_rows(device) if step_rows is None else step_rows
        within = settings.share_steps_within_request
        return cls(
            max_step_rows=int(step_rows or 0),
            share_within_request=default_share_within_request(device) if within is None else within,
            max_batch_tokens=int(tokens),
            batch_wait_timeout_s=float(wait),
            max_prefill_tokens=int(prefill or 0) or None,
            budget_bytes=int(budget_bytes),
            max_skipped=settings.max_skipped,
        )

    def prefill_cost(self, lookback: int, sample_count: int) -> int:
        """History tokens one series adds to a batch's prefill."""
        return lookback * sample_count

    def shares(
        self,
        picked_rows: int,
        other_rows: list[int],
        picked_requests: frozenset[str] = frozenset(),
        other_requests: list[frozenset[str]] | None = None,
    ) -> list[int]:
        """Which of the other live batches (their rows, in priority order) join the picked batch's
        decode step under this policy's cap and request rule (the scheduler's ``joining``) ->
        their indices."""
        return joining(
            picked_rows,
            other_rows,
            self.max_step_rows,
            self.share_within_request,
            picked_requests,
            other_requests,
        )


def replica_budget(settings: Settings, device: str, free_gpu_bytes: int | None = None) -> int:
    """Bytes one replica plans its batches for: the setting, else 90% of the free GPU memory, else
    2 GiB on a CPU."""
    if settings.device_budget_bytes:
        return int(settings.device_budget_bytes)
    if device_kind(device) == "cuda" and free_gpu_bytes is not None:
        return int(free_gpu_bytes * GPU_BUDGET_SHARE)
    return CPU_DEFAULT_BUDGET
