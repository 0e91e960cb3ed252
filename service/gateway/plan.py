"""Stage 2a, plan: the request's forecast options, built once, and its series cut into
memory-sized shards (the engine's memory model gives how many series fit one replica)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence

from kronos_core.options import ForecastOptions
from service.errors import RequestInvalid
from service.gateway.prepare import Prepared
from service.messages import ReplicaInfo, Shard
from service.schemas import ForecastRequest


class TooLargeError(ValueError):
    """One series of this lookback/horizon/sample_count does not fit the replica budget."""


def request_options(req: ForecastRequest) -> ForecastOptions:
    """The request's forecast options: the one place a request's fields map to them (no
    calibration: each replica applies its own, see ``Shard.calibrate``)."""
    return ForecastOptions(
        horizon=req.horizon, sample_count=req.sample_count, temperature=req.temperature,
        top_k=req.top_k, top_p=req.top_p, seed=req.seed, quantiles=tuple(req.quantiles), repair=req.repair,
    )


def calibration_covers(cal: dict | None, horizon: int, quantiles) -> bool:
    """Whether the replicas' calibration (``calibration_info``) covers this request's horizon and
    quantile levels; uncovered requests get the raw sample quantiles and ``calibrated: false``."""
    if not cal or not quantiles or horizon > cal["horizon"]:
        return False
    lo, hi = min(cal["levels"]), max(cal["levels"])
    central = [abs(2 * float(q) - 1) for q in quantiles if abs(float(q) - 0.5) > 1e-12]
    return all(lo - 1e-9 <= c <= hi + 1e-9 for c in central)


def plan_shards(
    lengths: Sequence[int],
    horizon: int,
    sample_count: int,
    fit: Callable[[int], int],
    num_replicas: int,
    shards_per_replica: int = 2,
    max_batch_tokens: int | None = None,
) -> list[slice]:
    """Contiguous slices of the request's series, in order.

    ``fit(lookback)`` is the engine memory model's number of series that fit one replica's
    budget for this horizon and sample count. Shards are at most that size and at most the
    token budget, and small enough that every replica gets ``shards_per_replica`` of them.
    """
    n = len(lengths)
    if n == 0:
        return []
    longest = max(int(x) for x in lengths)
    cap = int(fit(longest))
    if cap <= 0:
        raise TooLargeError(
            f"a single series with lookback={longest}, horizon={horizon}, sample_count={sample_count} "
            "does not fit one replica's device budget"
        )
    if max_batch_tokens:
        per_series = sample_count * (longest + horizon)
        tok_cap = max_batch_tokens // per_series
        if tok_cap <= 0:
            raise TooLargeError(
                f"one series needs {per_series} tokens (sample_count x (lookback + horizon)), "
                f"more than the batch token budget {max_batch_tokens}"
            )
        cap = min(cap, tok_cap)
    target = math.ceil(n / max(1, num_replicas * shards_per_replica))
    size = max(1, min(cap, target))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def memory_model_fit(info: ReplicaInfo, horizon: int, sample_count: int) -> Callable[[int], int]:
    """``fit(lookback)``: series that fit one replica, from the engine's memory model."""
    from kronos_core.engine.memory import max_batch_that_fits

    cache: dict[int, int] = {}

    def fit(lookback: int) -> int:
        if lookback not in cache:
            cache[lookback] = int(
                max_batch_that_fits(
                    info.model_cfg, info.tokenizer_cfg, info.budget_bytes, lookback, horizon,
                    sample_count=sample_count, max_context=info.max_context,
                )
            )
        return cache[lookback]

    return fit


def make_shards(req: ForecastRequest, prep: Prepared, info: ReplicaInfo, fit: Callable[[int], int],
                num_replicas: int, shards_per_replica: int) -> tuple[list[slice], list[Shard]]:
    """The request's shards and the slice of ``prep``'s series each holds; a series too long
    for one replica is a ``RequestInvalid`` naming ``lookback``."""
    options = request_options(req)
    calibrate = calibration_covers(info.model.get("calibration"), req.horizon, req.quantiles)
    try:
        slices = plan_shards([len(v) for v in prep.values], req.horizon, req.sample_count, fit,
                             num_replicas, shards_per_replica, info.max_batch_tokens)
    except TooLargeError as exc:
        raise RequestInvalid("lookback", str(exc)) from None
    rid = uuid.uuid4().hex[:12]
    shards = [Shard(rid, i, prep.values[s], prep.x_ts[s], prep.y_ts[s], options,
                    return_paths=req.return_paths or req.summary, calibrate=calibrate)
              for i, s in enumerate(slices)]
    return slices, shards
