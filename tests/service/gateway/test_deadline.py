"""A request planned past its deadline (``service.gateway.deadline``, issue 53): refused at once,
before any shard is sent, naming the estimate, the deadline and what would fit; run as asked
when it fits (or is past it by less than the margin); given a longer deadline when it came with
the service's default and the operator allows longer ones. No Ray: the gateway over the fake
store and replicas, the real planner and the bundled default model's dimensions."""

from __future__ import annotations

import asyncio
import math

import pytest
from service_fakes import FakeReplicas, FakeStore, fake_future, fake_info

from kronos_core.loading import DEFAULT_MODEL_DIR
from kronos_core.plan import roofline as R
from kronos_core.plan.planner import resolve_model
from service.common.errors import DeadlineUnreachable
from service.common.metrics import Metrics
from service.common.schemas import ForecastRequest
from service.common.settings import Settings
from service.gateway import ForecastPipeline
from service.gateway.deadline import Deadline, check, largest, request_planner, what_fits
from service.gateway.future import FutureTimestamps

# a planner whose seconds are easy to reason about: 10 ms a row-step (series x steps x paths)
LINEAR = lambda k, h, p: 0.01 * k * h * p  # noqa: E731


def _settings(**kw) -> Settings:
    return Settings(**{"max_context": 256, "request_timeout_s": 300.0, **kw})


def test_largest_is_the_last_that_fits_or_zero():
    assert largest(lambda x: x <= 7, 100) == 7
    assert largest(lambda x: x <= 700, 100) == 100
    assert largest(lambda x: False, 100) == 0 and largest(lambda x: True, 0) == 0


def test_within_its_deadline_a_request_runs_as_asked_and_its_plan_is_kept():
    d = Deadline(10.0, "request")
    check(d, LINEAR, 10, 5, 4, _settings(), lanes=2)  # 2 s planned
    assert d.planned_s == pytest.approx(2.0) and d.seconds == 10.0 and d.source == "request"


def test_past_its_deadline_by_less_than_the_margin_it_runs():
    d = Deadline(10.0, "request")
    check(d, LINEAR, 10, 5, 28, _settings(), lanes=2)  # 14 s planned, under 1.5 x 10 s
    assert d.planned_s == pytest.approx(14.0) and d.seconds == 10.0


def test_planned_well_past_the_clients_deadline_it_is_refused_naming_what_would_fit():
    d = Deadline(10.0, "request")
    with pytest.raises(DeadlineUnreachable) as ei:
        check(d, LINEAR, 20, 10, 32, _settings(), lanes=2, device="cpu")  # 64 s planned
    exc = ei.value
    assert exc.status == 422 and exc.code == "deadline_unreachable"
    assert exc.detail()[0]["loc"] == ["header", "x-kronos-timeout-s"]
    assert exc.detail()[0]["type"] == "deadline_unreachable"
    plan = exc.plan
    assert plan["planned_s"] == pytest.approx(64.0) and plan["deadline_s"] == 10.0
    assert plan["deadline_source"] == "request" and plan["margin"] == 1.5
    assert (plan["series"], plan["sample_count"], plan["horizon"], plan["lanes"]) == (20, 32, 10,
                                                                                     2)
    # each change alone, planned within the ~10 s left: 3 symbols (9.6 s), 4 paths (8 s), 1 step
    # (6.4 s)
    assert plan["fits"] == {"symbols": 3, "sample_count": 4, "horizon": 1, "timeout_s": 65}
    msg = exc.message
    for words in ("planned 64 s", "20 symbols x 32 sample paths x 10 steps",
                  "2 lane(s) of step loops, cpu",
                  "deadline of 10 s (X-Kronos-Timeout-S)", "1.5x", "refused before any work",
                  "at most 3 symbols, or sample_count 4, or horizon 1",
                  "X-Kronos-Timeout-S: 65 or more", "allows up to 300 s"):
        assert words in msg, (words, msg)
    # nothing smaller fits alone: said so
    with pytest.raises(DeadlineUnreachable) as ei:
        check(Deadline(1.0, "request"), LINEAR, 100, 10, 32, _settings(), lanes=2)
    assert ei.value.plan["fits"] == {"symbols": 0, "sample_count": 0, "horizon": 0,
                                     "timeout_s": 321}
    assert "no fewer symbols, sample paths or steps alone" in ei.value.message
    # the body is what OpenAPI declares for the route's 422 (what Schemathesis checks)
    import orjson

    from service.common.schemas import UnprocessableOut

    body = UnprocessableOut.model_validate(orjson.loads(orjson.dumps(ei.value.body())))
    assert body.code == "deadline_unreachable" and body.plan is not None
    assert body.plan.fits.timeout_s == 321
    # a deadline less the microseconds its request waited for a slot reads as the one asked
    with pytest.raises(DeadlineUnreachable) as ei:
        check(Deadline(0.99999, "request"), LINEAR, 100, 10, 32, _settings(), lanes=2)
    assert "deadline of 1 s (X-Kronos-Timeout-S)" in ei.value.message
    assert ei.value.plan["deadline_s"] == 1.0


def test_a_refusal_says_when_the_deadline_needed_is_more_than_the_service_gives():
    with pytest.raises(DeadlineUnreachable) as ei:
        check(Deadline(300.0, "default"), LINEAR, 1000, 10, 32, _settings(), lanes=1)
    exc = ei.value
    assert exc.detail()[0]["loc"] == ["body"]
    assert "the service's deadline of 300 s (KRONOS_REQUEST_TIMEOUT_S)" in exc.message
    assert "a deadline of 3201 s would be needed, more than this service allows (300 s" in (
        exc.message)
    assert exc.plan["fits"]["symbols"] == 93  # 93 x 3.2 s <= 300 s


def test_a_default_deadline_is_lengthened_when_the_operator_allows_longer_ones():
    d = Deadline(300.0, "default")
    check(d, LINEAR, 1000, 10, 32, _settings(max_request_timeout_s=6000.0), lanes=1)  # 3200 s
    assert d.source == "extended" and d.seconds == math.ceil(1.5 * 3200 + d.elapsed())
    assert "given" in d.note and "KRONOS_MAX_REQUEST_TIMEOUT_S" in d.note
    # up to the longest allowed: a plan within 1.5x of it still runs, with the longest
    d = Deadline(300.0, "default")
    check(d, LINEAR, 1000, 10, 32, _settings(max_request_timeout_s=3000.0), lanes=1)
    assert d.source == "extended" and d.seconds == 3000.0
    # past that, refused, naming the longest
    with pytest.raises(DeadlineUnreachable) as ei:
        check(Deadline(300.0, "default"), LINEAR, 1000, 10, 32,
              _settings(max_request_timeout_s=1000.0), lanes=1)
    assert "the longest deadline this service gives, 1000 s" in ei.value.message
    assert ei.value.plan["deadline_s"] == 1000.0
    assert ei.value.plan["fits"]["symbols"] == 312  # within the 1000 s it could have had


def test_a_clients_own_deadline_is_never_lengthened():
    with pytest.raises(DeadlineUnreachable):
        check(Deadline(10.0, "request"), LINEAR, 100, 10, 32,
              _settings(max_request_timeout_s=6000.0), lanes=1)


def test_no_plan_without_speed_figures_or_with_the_check_off():
    d = Deadline(1.0, "request")
    check(d, None, 100, 10, 32, _settings(), lanes=1)
    assert d.planned_s is None
    check(d, LINEAR, 100, 10, 32, _settings(deadline_check=False), lanes=1)
    assert d.planned_s is None
    assert request_planner(fake_info(), [100], 2, None) is None  # a replica without speed


def test_what_fits_keeps_the_rest_as_asked():
    assert what_fits(LINEAR, 10, 10, 10, 1.0) == {"symbols": 1, "sample_count": 1, "horizon": 1,
                                                  "timeout_s": 10}
    assert what_fits(LINEAR, 10, 10, 10, 0.5)["symbols"] == 0


# ---------------------------------------------------------------- through the gateway
MODEL = resolve_model(str(DEFAULT_MODEL_DIR))
THIS_CPU = R.Device("cpu", 16 * 2**30, 92e9, 2.3e9, 24e9, 0.0, "test figures",
                    op_overhead_s=1.5e-6, compute_eff=1.0, memory_eff=1.0)


def _gateway(live=None, **settings):
    info = fake_info(max_context=MODEL.max_context)
    info.model_cfg, info.tokenizer_cfg, info.speed = MODEL.model, MODEL.tokenizer, THIS_CPU
    replicas = FakeReplicas(info=info)
    s = Settings(**{"max_context": 256, "shards_per_replica": 2, "min_shard_tokens": 0,
                    **settings})
    gw = ForecastPipeline(
        s, FakeStore(n=400), replicas, Metrics(), num_replicas=2,
        fit_factory=lambda info, h, sc: lambda L: 8, future=FutureTimestamps(fake_future),
        live_replicas=live,
    )
    return gw, replicas


def test_the_gateway_refuses_before_any_shard_and_runs_a_request_that_fits():
    gw, replicas = _gateway()
    # 400 series x 100 paths x 200 steps: about 20 minutes planned on two lanes, against 30 s
    big = ForecastRequest(symbols=[f"S{i:03d}" for i in range(400)], horizon=200,
                          sample_count=100)
    with pytest.raises(DeadlineUnreachable) as ei:
        asyncio.run(gw.forecast(big, timeout_s=30.0, timeout_source="request"))
    assert replicas.calls == 0  # nothing was sent
    plan = ei.value.plan
    assert plan["series"] == 400 and plan["lanes"] == 2 and plan["device"] == "cpu"
    assert plan["planned_s"] > 1.5 * 30
    assert 0 < plan["fits"]["symbols"] < 400 and plan["fits"]["timeout_s"] > 30
    assert gw._inflight == 0  # its slot is given back
    # the plan: the real one over the series' lengths (lookback 256 - 200 of 300 candles)
    planner = request_planner(gw._info, [56] * 400, 2, 8)
    assert plan["planned_s"] == pytest.approx(planner(400, 200, 100), rel=1e-3)
    small = ForecastRequest(symbols=["S001", "S002"], horizon=2, sample_count=1)
    out = asyncio.run(gw.forecast(small, timeout_s=30.0, timeout_source="request"))
    assert out.symbols == ["S001", "S002"] and replicas.calls >= 1
    assert out.deadline["source"] == "request" and out.deadline["seconds"] == 30.0
    assert out.deadline["note"] == ""
    assert 0 < out.deadline["planned_s"] < 1.0  # timing-ok: an estimate, nothing measured


def test_the_answer_says_a_lengthened_deadline_and_unknown_symbols_cost_nothing():
    gw, _ = _gateway(request_timeout_s=5.0, max_request_timeout_s=3600.0)
    req = ForecastRequest(symbols=[f"S{i:03d}" for i in range(64)], horizon=40, sample_count=32)
    planned = request_planner(asyncio.run(gw.info()), [216] * 64, 2, 8)(64, 40, 32)
    assert planned > 5.0  # past the default deadline
    out = asyncio.run(gw.forecast(req))  # no header: the default deadline
    assert out.deadline["planned_s"] == pytest.approx(planned, rel=1e-3)
    assert out.deadline["source"] == "extended" and out.deadline["seconds"] >= 1.5 * planned
    assert "KRONOS_MAX_REQUEST_TIMEOUT_S" in out.deadline["note"]
    assert len(out.symbols) == 64
    # a request of unknown symbols only is planned at nothing, and answered
    gw, replicas = _gateway()
    out = asyncio.run(gw.forecast(ForecastRequest(symbols=["NOPE"], horizon=8),
                                  timeout_s=30.0, timeout_source="request"))
    assert out.errors and out.deadline["planned_s"] is None and replicas.calls == 0


def test_the_plan_counts_the_replicas_live():
    gw, _ = _gateway(live=lambda: 1)
    info = asyncio.run(gw.info())
    assert gw.lanes(info) == 1
    gw, _ = _gateway(live=lambda: None)  # not known yet: the replicas asked for
    assert gw.lanes(info) == 2
    info.step_loops = 2
    assert info.device.startswith("cpu")
    assert gw.lanes(info) == 2  # a CPU replica's loops share its cores: one lane
    info.device = "cuda:0"
    assert gw.lanes(info) == 4


def test_a_deadline_the_read_used_up_is_a_timeout_unless_the_plan_never_fitted():
    """On a loaded machine reading the windows once took longer than a 1 s deadline, and the
    request got the 504 meant for running out of time although its plan was far past the
    deadline. Now the plan decides once the read is done: far past, the refusal (422); within
    the margin, the timeout (504)."""
    import time as _time

    from service.common.errors import DeadlineExceeded

    d = Deadline(1.0, "request")
    d.start -= 2.0  # the read took 2 s of a 1 s deadline
    check(d, LINEAR, 10, 5, 2, _settings(), lanes=2)  # planned 1 s: fitted; the caller's 504
    assert d.planned_s == pytest.approx(1.0)
    with pytest.raises(DeadlineUnreachable) as ei:
        check(d, LINEAR, 20, 10, 32, _settings(), lanes=2)  # planned 64 s: never fitted
    assert ei.value.plan["fits"]["symbols"] >= 0 and ei.value.plan["remaining_s"] == 1.0

    class SlowRead(ForecastPipeline):
        def prepare(self, req, lookback):
            _time.sleep(1.5)  # the store read on a busy machine
            return super().prepare(req, lookback)

    gw, replicas = _gateway()
    slow = SlowRead(gw.settings, gw.store, replicas, gw.metrics, num_replicas=2,
                    fit_factory=gw.fit_factory, future=gw.future)
    big = ForecastRequest(symbols=[f"S{i:03d}" for i in range(400)], horizon=200,
                          sample_count=100)
    with pytest.raises(DeadlineUnreachable):
        asyncio.run(slow.forecast(big, timeout_s=1.0, timeout_source="request"))
    small = ForecastRequest(symbols=["S001"], horizon=2, sample_count=1)
    with pytest.raises(DeadlineExceeded):
        asyncio.run(slow.forecast(small, timeout_s=1.0, timeout_source="request"))
    assert replicas.calls == 0 and slow._inflight == 0
