"""Stage 2a, shards: the request's forecast options, built once, and its series cut into
memory-sized shards (the engine's memory model gives how many series fit one replica)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence

from kronos_core.base.errors import WarningCode
from kronos_core.base.options import ForecastOptions
from kronos_core.calibration.policy import CalibrationPolicy, SeriesCalibration
from service.common.errors import RequestInvalid
from service.common.messages import ReplicaInfo, Shard
from service.common.schemas import ForecastRequest
from service.gateway.prepare import Prepared, symbol_warning


class TooLargeError(ValueError):
    """One series of this lookback/horizon/sample_count does not fit the replica budget."""


def request_options(req: ForecastRequest) -> ForecastOptions:
    """The request's forecast options: the one place a request's fields map to them (no
    calibration: each replica applies its own, see ``Shard.calibrate``)."""
    return ForecastOptions(
        horizon=req.horizon,
        sample_count=req.paths,
        temperature=req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        seed=req.seed,
        quantiles=tuple(req.quantiles),
        repair=req.repair,
        price_limits=req.price_limits,
        move_correction=req.move_correction,
    )


def split_by_calibration(slices: list[slice], decisions: list[SeriesCalibration]) -> list[slice]:
    """``slices`` cut further where the calibration decision changes, so one shard is calibrated
    (with one group) as a whole."""
    out = []
    for sl in slices:
        start = sl.start
        for i in range(sl.start + 1, sl.stop):
            if (decisions[i].calibrate, decisions[i].group) != (
                decisions[i - 1].calibrate,
                decisions[i - 1].group,
            ):
                out.append(slice(start, i))
                start = i
        out.append(slice(start, sl.stop))
    return out


def plan_shards(
    lengths: Sequence[int],
    horizon: int,
    sample_count: int,
    fit: Callable[[int], int],
    num_replicas: int,
    shards_per_replica: int = 2,
    max_batch_tokens: int | None = None,
    min_shard_tokens: int = 0,
) -> list[slice]:
    """Contiguous slices of the request's series, in order.

    ``fit(lookback)`` is the engine memory model's number of series that fit one replica's
    budget for this horizon and sample count. Shards are at most that size and at most the
    token budget, and small enough that every replica gets ``shards_per_replica`` of them, but
    hold at least ``min_shard_tokens`` history tokens (series x lookback x sample_count) where the
    request has that many: a small request goes to one replica whole, not in slivers to all of them
    (a sliver costs a call, and a request of more shards than the replicas take at once waits for
    the first to come back before the rest go).
    """
    n = len(lengths)
    if n == 0:
        return []
    longest = max(int(x) for x in lengths)
    cap = int(fit(longest))
    if cap <= 0:
        raise TooLargeError(
            f"a single series with lookback={longest}, horizon={horizon}, "
            f"sample_count={sample_count} "
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
    least = math.ceil(min_shard_tokens / (sample_count * max(1, longest)))
    size = max(1, min(cap, max(target, least)))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def warm_memory_model(info: ReplicaInfo) -> None:
    """Count the model's parameters once (the memory model's first call builds the model on the meta
    device, about a second), when a replica is first described, so the first request does not pay
    it."""
    from kronos_core.engine.memory import count_parameters

    if info.model_cfg is not None and info.tokenizer_cfg is not None:
        count_parameters(info.model_cfg)
        count_parameters(info.tokenizer_cfg)


def memory_model_fit(info: ReplicaInfo, horizon: int, sample_count: int) -> Callable[[int], int]:
    """``fit(lookback)``: series that fit one replica, from the engine's memory model."""
    from kronos_core.engine.memory import max_batch_that_fits

    cache: dict[int, int] = {}

    def fit(lookback: int) -> int:
        if lookback not in cache:
            cache[lookback] = int(
                max_batch_that_fits(
                    info.model_cfg,
                    info.tokenizer_cfg,
                    info.budget_bytes,
                    lookback,
                    horizon,
                    sample_count=sample_count,
                    max_context=info.max_context,
                )
            )
        return cache[lookback]

    return fit


def calibration_decisions(
    policy: CalibrationPolicy | None, req: ForecastRequest, prep: Prepared
) -> list[SeriesCalibration]:
    """Per usable series of ``prep``: the replicas' calibration policy's decision (none without a
    calibration)."""
    if policy is None:
        return [SeriesCalibration() for _ in prep.symbols]
    return [
        policy.decide(req.horizon, req.quantiles, ts, symbol)
        for symbol, ts in zip(prep.symbols, prep.x_ts, strict=True)
    ]


def make_shards(
    req: ForecastRequest,
    prep: Prepared,
    info: ReplicaInfo,
    fit: Callable[[int], int],
    num_replicas: int,
    shards_per_replica: int,
    want_paths: bool = False,
    min_shard_tokens: int = 0,
    calibration: CalibrationPolicy | None = None,
    request_id: str | None = None,
) -> tuple[list[slice], list[Shard]]:
    """The request's shards and the slice of ``prep``'s series each holds; a series too long
    for one replica is a ``RequestInvalid`` naming ``lookback``. Each series the deployment's
    calibration does not apply to gets an ``uncalibrated`` warning saying why. ``want_paths``:
    the paths come back even if the request does not ask for them (the ledger records them).
    ``request_id``: the id the shards carry (the HTTP request's ``X-Request-Id``); default: new."""
    options = request_options(req)
    decisions = calibration_decisions(calibration, req, prep)
    for i, d in enumerate(decisions):
        if d.reason is not None:
            prep.warnings[i].append(symbol_warning(WarningCode.UNCALIBRATED, d.reason))
    try:
        slices = plan_shards(
            [len(v) for v in prep.values],
            req.horizon,
            req.paths,
            fit,
            num_replicas,
            shards_per_replica,
            info.max_batch_tokens,
            min_shard_tokens,
        )
    except TooLargeError as exc:
        raise RequestInvalid("lookback", str(exc)) from None
    slices = split_by_calibration(slices, decisions)
    rid = request_id or uuid.uuid4().hex[:12]
    shards = [
        Shard(
            rid,
            i,
            prep.values[s],
            prep.x_ts[s],
            prep.y_ts[s],
            options,
            return_paths=req.return_paths or req.summary or want_paths,
            calibrate=decisions[s.start].calibrate,
            calibration_group=decisions[s.start].group,
            price_limits=prep.price_limits[s] if options.price_limits else None,
        )
        for i, s in enumerate(slices)
    ]
    return slices, shards
