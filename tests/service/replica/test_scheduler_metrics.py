"""The step scheduler's metrics: a replica's BatchReport carries them, the gateway's
``Metrics.record_batch`` records them once, and the dashboard's scheduling panels query metrics that
exist."""

import json
import re
from pathlib import Path

from service_fakes import FakePredictor, make_shard, sample_value

from service.common.messages import BatchReport
from service.common.metrics import Metrics
from service.replica.step_runner import StepRunner

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana-dashboard.json"
NEW = (
    "kronos_replica_queue_wait_seconds", "kronos_decode_step_rows", "kronos_admitted_mid_batch",
    "kronos_shared_decode_steps",
)


def report(**kw) -> BatchReport:
    base = dict(
        replica_id="r1", device="cpu", series=5, shards=2, engine_calls=1, oom_splits=0,
        tokens_generated=10, seconds=0.1, queue_depth=0, mem_allocated=1, mem_reserved=1,
        mem_peak=1,
    )
    return BatchReport(**{**base, **kw})


def test_record_batch_records_queue_waits_step_rows_and_mid_batch_admissions():
    m = Metrics()
    m.record_batch(
        report(
            queue_wait_s=[0.002, 0.3], decode_steps=24, step_rows=5, admitted_mid_batch=2,
            shared_steps=20,
        )
    )
    lbl = {"replica": "r1"}
    assert sample_value(m, "kronos_replica_queue_wait_seconds_count", lbl) == 2
    assert abs(sample_value(m, "kronos_replica_queue_wait_seconds_sum", lbl) - 0.302) < 1e-9
    assert sample_value(m, "kronos_decode_step_rows_count", lbl) == 24
    assert sample_value(m, "kronos_decode_step_rows_sum", lbl) == 24 * 5
    assert sample_value(m, "kronos_admitted_mid_batch_total", lbl) == 2
    assert sample_value(m, "kronos_shared_decode_steps_total", lbl) == 20
    m.record_batch(report())  # a batch run to completion adds nothing to them
    assert sample_value(m, "kronos_decode_step_rows_count", lbl) == 24


def test_a_step_runner_report_reaches_the_metrics():
    r, out = StepRunner(FakePredictor(), "r1", "cpu"), []
    r.submit(make_shard(3, 0), out.append)
    r.run_until_idle()
    m = Metrics()
    for rep in r.take_reports():
        m.record_batch(rep)
    assert sample_value(m, "kronos_replica_queue_wait_seconds_count", {"replica": "r1"}) == 1
    assert sample_value(m, "kronos_decode_step_rows_sum", {"replica": "r1"}) == 3


def test_the_dashboard_has_panels_for_the_scheduler_metrics_and_they_exist():
    exposed = Metrics().exposition().decode()
    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
    for name in NEW:
        assert name in exprs
    for used in set(re.findall(r"kronos_[a-z_]+", exprs)):
        family = re.sub(r"_(bucket|sum|count|total)$", "", used)
        assert f"# TYPE {family} " in exposed or f"# TYPE {family}_total " in exposed, used
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
