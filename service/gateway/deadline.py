"""A request's deadline against its planned time (issue 53): no request computes for minutes only
to fail at its deadline.

Once its windows are read (their lengths known) and before any shard is sent, the gateway plans
the request's time (``kronos_core.plan.roofline.forecast_seconds``: the prefill once per series,
the decode once per row, series x paths, and step, spread over the replicas live x their step
loops, at the speed the replicas reported, ``ReplicaInfo.speed``), then ``check`` decides:

* planned within the time left: run it as asked;
* planned past it, the deadline the service's default (no ``X-Kronos-Timeout-S``) and the operator
  allowing longer ones (``KRONOS_MAX_REQUEST_TIMEOUT_S`` above ``KRONOS_REQUEST_TIMEOUT_S``): run
  it with a deadline that fits (``margin`` x the plan, at most the longest), and the answer's
  ``deadline`` says so;
* planned past it by at most ``margin`` times: run it (the plan is an estimate);
* else refuse it at once, ``DeadlineUnreachable`` (a 422 naming the estimate, the deadline and
  what would fit: the most symbols, paths or steps that the plan puts within the time left, the
  rest as asked, and the deadline it would need).

A client's own ``X-Kronos-Timeout-S`` is never lengthened: it is the client's bound. No speed
figures (a replica that could not measure its device) or ``KRONOS_DEADLINE_CHECK=false``: every
request runs until its deadline, as before. No Ray, no FastAPI.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from service.common.errors import DeadlineUnreachable
from service.common.messages import ReplicaInfo
from service.common.settings import Settings

Source = Literal["request", "default", "extended"]
# (the first k usable series, horizon, sample paths) -> planned seconds
Planner = Callable[[int, int, int], float]
HEADER = "X-Kronos-Timeout-S"


@dataclass
class Deadline:
    """A request's deadline: ``seconds`` after ``start`` (``time.monotonic``). ``source``: who set
    it (``request``: the ``X-Kronos-Timeout-S`` header; ``default``: ``KRONOS_REQUEST_TIMEOUT_S``;
    ``extended``: the service, for a request planned past its default). ``planned_s``: the
    request's planned seconds once known (None: not planned)."""

    seconds: float
    source: Source = "default"
    start: float = field(default_factory=time.monotonic)
    planned_s: float | None = None
    note: str = ""

    def remaining(self) -> float:
        return self.start + self.seconds - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def as_dict(self) -> dict[str, Any]:
        """The answer's ``deadline`` (``DeadlineOut``)."""
        return {"seconds": round(self.seconds, 3), "source": self.source,
                "planned_s": None if self.planned_s is None else round(self.planned_s, 3),
                "note": self.note}


def seconds_text(seconds: float) -> str:
    """Seconds for a message: to a tenth, trailing zeros dropped (a deadline less the
    microseconds a request waited for its slot reads as the deadline asked)."""
    return f"{round(seconds, 1):g}"


_s = seconds_text


def request_planner(
    info: ReplicaInfo, lengths: list[int], lanes: int, batch: int | None, sliding: str = "exact",
    precision: str = "fp32",
) -> Planner | None:
    """The request's planner over its usable series' history ``lengths`` (in request order), or
    None when the replicas reported no speed figures (or no model configuration)."""
    if info.speed is None or info.model_cfg is None or info.tokenizer_cfg is None:
        return None
    from kronos_core.plan.roofline import forecast_seconds

    def planned(k: int, horizon: int, paths: int) -> float:
        return forecast_seconds(
            info.model_cfg, info.tokenizer_cfg, lengths[:k], horizon, paths, info.speed, lanes,
            info.max_context, batch, precision, sliding,
        ).seconds

    return planned


def largest(fits: Callable[[int], bool], most: int) -> int:
    """The largest ``x`` in 1..``most`` with ``fits(x)`` (monotone: true up to some value), 0 when
    none."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def what_fits(planned: Planner, series: int, horizon: int, paths: int, seconds: float,
              elapsed_s: float = 0.0) -> dict[str, int]:
    """What the plan puts within ``seconds``, one change at a time, the rest as asked: the most
    series (the first ones, in request order), sample paths, horizon steps (0: none fits); and
    ``timeout_s``, the deadline the request as asked would need (its plan and the ``elapsed_s``
    it spent before planning, rounded up)."""
    return {
        "symbols": largest(lambda k: planned(k, horizon, paths) <= seconds, series - 1),
        "sample_count": largest(lambda k: planned(series, horizon, k) <= seconds, paths - 1),
        "horizon": largest(lambda h: planned(series, h, paths) <= seconds, horizon - 1),
        "timeout_s": max(1, math.ceil(planned(series, horizon, paths) + elapsed_s)),
    }


def check(
    deadline: Deadline, planned: Planner | None, series: int, horizon: int, paths: int,
    settings: Settings, lanes: int, device: str = "", kind: str = "symbols",
) -> None:
    """Plan the request and decide (module docstring): sets ``deadline.planned_s``, lengthens a
    default deadline the operator allows to be, or raises ``DeadlineUnreachable``. ``kind``: what
    the request's series are called (``symbols`` or ``series``)."""
    if planned is None or series == 0 or not settings.deadline_check:
        return
    plan = planned(series, horizon, paths)
    deadline.planned_s = plan
    left = deadline.remaining()
    if plan <= left:
        return
    margin = settings.deadline_margin
    if left <= 0 and plan <= margin * deadline.seconds:
        # reading the windows used up the deadline (a loaded machine) though the plan fitted
        # it: the request ran out of time (504 from the caller), it was not unreachable
        return
    margin, longest = settings.deadline_margin, settings.longest_timeout_s
    elapsed = deadline.elapsed()
    extendable = deadline.source == "default" and longest > deadline.seconds
    if extendable:
        granted = min(longest, max(deadline.seconds, math.ceil(elapsed + margin * plan)))
        if plan <= margin * (granted - elapsed):
            deadline.note = (
                f"planned {plan:.3g} s, past the default deadline of {_s(deadline.seconds)} s "
                f"(KRONOS_REQUEST_TIMEOUT_S): given {_s(granted)} s (the service allows up to "
                f"{_s(longest)} s, KRONOS_MAX_REQUEST_TIMEOUT_S)"
            )
            deadline.seconds, deadline.source = float(granted), "extended"
            return
    elif plan <= margin * left:
        return
    # the time the request could have had: what its suggestions must fit in (the whole
    # deadline when the read alone used it up)
    budget = longest - elapsed if extendable else left if left > 0 else deadline.seconds
    fits = what_fits(planned, series, horizon, paths, budget, elapsed)
    limit = longest if extendable else deadline.seconds
    raise DeadlineUnreachable(
        _message(deadline, limit, plan, budget, fits, series, horizon, paths, lanes, device, kind,
                 settings),
        ["header", HEADER.lower()] if deadline.source == "request" else ["body"],
        {"planned_s": round(plan, 3), "deadline_s": round(limit, 3),
         "deadline_source": deadline.source, "remaining_s": round(budget, 3), "margin": margin,
         "longest_timeout_s": longest, "series": series, "sample_count": paths,
         "horizon": horizon, "lanes": lanes, "device": device, "fits": fits},
    )


def _message(deadline: Deadline, limit: float, plan: float, budget: float, fits: dict[str, int],
             series: int, horizon: int, paths: int, lanes: int, device: str, kind: str,
             settings: Settings) -> str:
    """The refusal in words: the plan, the deadline it is past and whose, what would fit."""
    longest = settings.longest_timeout_s
    if deadline.source == "request":
        whose = f"this request's deadline of {_s(limit)} s ({HEADER})"
    elif limit > deadline.seconds:
        whose = (f"the longest deadline this service gives, {_s(limit)} s "
                 "(KRONOS_MAX_REQUEST_TIMEOUT_S)")
    else:
        whose = f"the service's deadline of {_s(limit)} s (KRONOS_REQUEST_TIMEOUT_S)"
    options = [
        text for text, value in (
            (f"at most {fits['symbols']} {kind}", fits["symbols"]),
            (f"sample_count {fits['sample_count']}", fits["sample_count"]),
            (f"horizon {fits['horizon']}", fits["horizon"]),
        ) if value
    ]
    fewer = (", or ".join(options) if options
             else f"no fewer {kind}, sample paths or steps alone")
    need = fits["timeout_s"]
    if need <= longest:
        longer = f"or {HEADER}: {need} or more (this service allows up to {_s(longest)} s)"
    else:
        longer = (f"a deadline of {need} s would be needed, more than this service allows "
                  f"({_s(longest)} s; its operator sets KRONOS_MAX_REQUEST_TIMEOUT_S)")
    on = f"{lanes} lane(s) of step loops" + (f", {device}" if device else "")
    return (
        f"planned {plan:.3g} s ({series} {kind} x {paths} sample paths x {horizon} steps on {on}), "
        f"past {whose} by more than {settings.deadline_margin:g}x: refused before any work. To "
        f"fit in {max(budget, 0):.3g} s, the rest as asked: {fewer}; {longer}"
    )
