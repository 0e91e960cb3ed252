"""``kronos soak``'s parts without a service: the memory/FD trend analysis, process roles and
sampling of a real process tree, finding the service's Ray GCS, and the summary's checks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from loadtests import soak_probe
from loadtests.soak import counts_delta
from loadtests.soak_chaos import gcs_address
from loadtests.soak_probe import Sample, analyse, role_of
from loadtests.soak_report import checks, figures, write

MIB = 2**20


def _samples(series: dict[int, list[tuple[str, int, int]]], every: float = 5.0) -> list[Sample]:
    n = max(len(v) for v in series.values())
    return [
        Sample(i * every, {pid: v[i] for pid, v in series.items() if i < len(v) and v[i]})
        for i in range(n)
    ]


def test_flat_memory_passes_and_growth_beyond_the_tolerance_fails():
    flat = [("gateway", (300 + i % 3) * MIB, 40) for i in range(20)]
    growing = [("predictor", (400 + 10 * i) * MIB, 30) for i in range(20)]
    rep = analyse(_samples({1: flat, 2: growing}), warmup_s=10)
    by_pid = {p.pid: p for p in rep.steady}
    # medians of samples 2-4 (430 MiB) and 17-19 (580 MiB): +34.9 %
    assert by_pid[1].rss_growth_pct < 1 and by_pid[2].rss_growth_pct == pytest.approx(
        100 * 150 / 430
    )
    assert not rep.memory_flat and rep.max_rss_growth_pct == pytest.approx(by_pid[2].rss_growth_pct)
    assert by_pid[2].samples == 18  # the first two samples (t=0, 5) are warm-up
    assert analyse(_samples({1: flat}), warmup_s=10).memory_flat


def test_warm_up_growth_does_not_count_and_one_spike_does_not_decide():
    # doubles during warm-up, one spike after it, flat otherwise
    rss = [100, 150, 200] + [200] * 8 + [400] + [200] * 8
    rep = analyse(_samples({7: [("raylet", r * MIB, 20) for r in rss]}), warmup_s=15)
    (p,) = rep.steady
    assert p.rss_start == p.rss_end == 200 * MIB and p.rss_max == 400 * MIB
    assert rep.memory_flat and rep.as_dict()["processes"][0]["rss_max_mib"] == 400


def test_fd_growth_is_caught():
    fds = [10] * 5 + [12, 14, 16, 18, 20]
    rep = analyse(_samples({3: [("serve_proxy", 50 * MIB, f) for f in fds]}), warmup_s=0)
    assert rep.max_fd_growth == 8 and not rep.fds_flat and rep.memory_flat  # medians 10 -> 18
    rep = analyse(_samples({3: [("serve_proxy", 50 * MIB, f) for f in reversed(fds)]}), warmup_s=0)
    assert rep.fds_flat  # fewer FDs at the end is fine


def test_killed_and_replacement_processes_are_listed_apart():
    steady = [("gateway", 100 * MIB, 10)] * 10
    killed = [("predictor", 500 * MIB, 30)] * 4 + [None] * 6
    # bigger, but not a trend of one process
    replacement = [None] * 5 + [("predictor", 900 * MIB, 30)] * 5
    rep = analyse(_samples({1: steady, 2: killed, 3: replacement}), warmup_s=0)
    assert [p.pid for p in rep.steady] == [1] and rep.memory_flat
    assert rep.gone == [{"pid": 2, "role": "predictor"}]
    assert rep.late == [{"pid": 3, "role": "predictor", "alive_at_end": True}]


def test_too_few_samples_after_warm_up_is_an_error_naming_the_fix():
    with pytest.raises(ValueError, match="warm-up"):
        analyse(_samples({1: [("gcs", MIB, 1)] * 3}), warmup_s=10)


@pytest.mark.parametrize("name, cmd, role", [
    ("python", "ray::ServeReplica:kronos:Predictor", "predictor"),
    ("python", "ray::ServeReplica:kronos:Gateway.handle_request", "gateway"),
    ("python", "ray::ServeController.listen_for_change", "serve_controller"),
    ("python", "ray::ProxyActor", "serve_proxy"),
    ("python", "ray::IDLE", "ray_idle_worker"),
    ("gcs_server", "/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server "
                   "--gcs_server_port=0", "gcs"),
    ("raylet", "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet "
               "--node-ip-address=1", "raylet"),
    # a worker before it takes its actor's title names the raylet's socket: not a raylet
    ("python", "python /venv/ray/_private/workers/default_worker.py "
               "--raylet-name=/tmp/ray/s/sockets/raylet",
     "ray_worker_starting"),
    ("python", "python -u /venv/ray/dashboard/agent.py --x", "dashboard_agent"),
    ("python", "ray::SomethingElse", "ray_worker:SomethingElse"),
])
def test_roles_from_ray_process_titles(name, cmd, role):
    proc = SimpleNamespace(pid=5, cmdline=lambda: cmd.split(), name=lambda: name)
    assert role_of(proc, root_pid=1) == role
    assert (
        role_of(SimpleNamespace(pid=1, cmdline=lambda: [], name=lambda: "python"), root_pid=1)
        == "driver"
    )


@pytest.fixture
def process_tree():
    """A parent python process with two children, like a Ray driver's: a GCS server started on
    port 0 (it picks one) and a raylet told the GCS's address."""
    code = (
        "import subprocess, sys, time\nfor a in ('--gcs_server_port=0 --node-ip-address=10.0.0.9', "
        "'--gcs-address=127.0.0.1:6390'):\n    subprocess.Popen([sys.executable, '-c', 'import "
        "time; time.sleep(60)', *a.split()])\ntime.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    proc = psutil.Process(parent.pid)
    deadline = time.monotonic() + 30
    while len(proc.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    children = proc.children()
    assert len(children) == 2, "the child processes did not start"
    yield parent.pid, children[0].pid
    for c in proc.children(recursive=True):
        c.kill()
    parent.kill()
    parent.wait()


def test_sampling_a_real_process_tree(process_tree):
    root, child = process_tree
    s = soak_probe.sample_tree(root, t=1.5)
    assert len(s.procs) == 3 and {root, child} <= set(s.procs) and s.t == 1.5
    assert sorted(r for r, _, _ in s.procs.values()) == ["driver", "python", "python"]
    assert s.procs[root][0] == "driver"
    assert all(rss > MIB and fds >= 3 for _, rss, fds in s.procs.values())
    # the soak's own processes
    assert child not in soak_probe.sample_tree(root, 0, exclude={child}).procs


def test_gcs_address_from_the_tree_and_a_clear_error_without_one(process_tree):
    root, _ = process_tree
    assert gcs_address(root) == "127.0.0.1:6390"
    lone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(RuntimeError, match=f"no Ray GCS in the process tree of pid {lone.pid}"):
            gcs_address(lone.pid)
    finally:
        lone.kill()
        lone.wait()


def test_no_listener_on_the_port_names_the_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening
        with pytest.raises(RuntimeError, match=f"no process listens on port {port}"):
            soak_probe.find_root(port)


def _locust(ok: int, shed: int, failed: int, run_s: float = 100.0) -> dict:
    """A ``kronos loadtest`` summary: json/arrow forecast rows plus the one GET of the universe."""
    fc = ok + shed + failed
    rows = [
        {
            "name": "/v1/forecast json", "requests": fc - fc // 5,
            "failures": (shed + failed) - (shed + failed) // 2,
        },
        {"name": "/v1/forecast arrow", "requests": fc // 5, "failures": (shed + failed) // 2},
        {"name": "/v1/symbols", "requests": 1, "failures": 0},
    ]
    return {
        "run_time_s": run_s, "requests": fc + 1, "ok_200": ok, "shed_503_429": shed,
        "failures": failed, "series_per_s": ok * 100 / run_s, "p50_ms": 900, "p95_ms": 2000,
        "p99_ms": 3000, "max_ms": 4000.4, "endpoints": rows,
    }


def _counts(ok200: int, retries: int = 0, lost: int = 0) -> dict:
    errors = {"replica_unavailable": lost} if lost else {}
    return {"shard_retries": retries, "series_forecast": ok200 * 100, "errors": errors,
            "forecast_status": {"200": ok200}}


def test_figures_count_shed_apart_from_failures_and_add_up():
    fig = figures(_locust(ok=90, shed=10, failed=0), _counts(90, retries=3))
    assert fig["forecast_requests"] == 100 and fig["failed"] == 0 and fig["shed_503_429"] == 10
    assert fig["requests_per_s"] == 1.0 and fig["shard_retries"] == 3 and fig["max_ms"] == 4000
    ok = checks(fig, {"memory_flat": True, "fds_flat": True}, None, 100)
    assert all(ok.values()) and "chaos_ran" not in ok


def test_checks_fail_on_failures_lost_series_and_uncounted_answers():
    mem = {"memory_flat": True, "fds_flat": True}
    failed = checks(figures(_locust(90, 0, 2), _counts(90)), mem, None, 100)
    assert not failed["no_failed_requests"] and failed["counts_add_up"]
    lost = checks(figures(_locust(90, 0, 0), _counts(90, lost=5)), mem, None, 100)
    assert not lost["no_series_lost"]
    # service saw fewer 200s
    uncounted = checks(figures(_locust(90, 0, 0), _counts(80)), mem, None, 100)
    assert not uncounted["counts_add_up"]
    assert not checks(
        figures(_locust(90, 0, 0), _counts(90)), {"memory_flat": False, "fds_flat": True}, None, 100
    )["memory_flat"]


def test_chaos_checks_need_the_kills_and_the_recoveries():
    fig, mem = figures(_locust(90, 0, 0), _counts(90)), {"memory_flat": True, "fds_flat": True}
    kills = [
        {"t_s": 60.0 * i, "replica": f"r{i}", "replicas_before": 2, "recovered_after_s": 12.0}
        for i in (1, 2, 3)
    ]
    # the next kill came first: allowed, if all run again at the end
    kills[1]["recovered_after_s"] = None
    chaos = {"every_s": 60, "kills": kills, "errors": [], "all_recovered_at_end": True}
    assert all(checks(fig, mem, chaos, 200).values())
    assert not checks(fig, mem, {**chaos, "kills": kills[:1]}, 200)["chaos_ran"]  # 3 were due
    assert not checks(fig, mem, {**chaos, "all_recovered_at_end": False}, 200)["replicas_recovered"]
    assert not checks(fig, mem, {**chaos, "errors": ["no predictor replica alive"]}, 200)[
        "chaos_ran"
    ]


def test_counts_delta_of_service_metrics():
    before = {"shard_retries": 2.0, "series_forecast": 100.0, "errors": {"unknown_symbol": 1.0},
              "forecast_status": {"200": 5.0}}
    after = {"shard_retries": 7.0, "series_forecast": 600.0,
             "errors": {"unknown_symbol": 1.0, "replica_unavailable": 4.0},
             "forecast_status": {"200": 10.0, "503": 2.0}}
    assert counts_delta(before, after) == {"shard_retries": 5, "series_forecast": 500,
                                           "errors": {"replica_unavailable": 4},
                                           "forecast_status": {"200": 5, "503": 2}}


def test_summary_files(tmp_path):
    from loadtests.soak_report import summarise

    args = SimpleNamespace(
        warmup=10, rss_tolerance=10.0, duration=100, replicas=2, sample_every=5, users=2,
        spawn_rate=1, symbols=100, horizon=8, lookback=128, wait="0.5,1.5",
    )
    samples = _samples({1: [("gateway", 100 * MIB, 10)] * 8, 2: [("raylet", 50 * MIB, 20)] * 8})
    kills = [{"t_s": 60.0, "replica": "abc", "replicas_before": 2, "recovered_after_s": 9.5}]
    parts = {
        "samples": samples, "counts": _counts(90), "load_start": [1.0, 2.0, 3.0],
        "load_end": [2.0, 2.0, 3.0], "locust": _locust(90, 10, 0),
        "chaos": {"every_s": 60, "kills": kills, "errors": [], "all_recovered_at_end": True},
    }
    summary = summarise(args, parts, url="http://127.0.0.1:1", root_pid=1, started_by_soak=True,
                        started_at="2026-01-01T00:00:00+00:00")
    write(summary, tmp_path)
    assert summary["passed"] and summary["kind"] == "soak with chaos"
    loaded = json.loads((tmp_path / "summary.json").read_text())
    assert loaded["figures"]["shed_503_429"] == 10 and loaded["machine"]["load_avg_start"] == [
        1.0, 2.0, 3.0,
    ]
    assert [p["role"] for p in loaded["memory"]["processes"]] == ["gateway", "raylet"]
    md = (tmp_path / "summary.md").read_text()
    assert md.startswith("# Soak: soak with chaos (a predictor replica killed every 60 s): PASSED")
    assert "| 60.0 | abc | 2 | 9.5 |" in md and "| gateway | 1 | 100.0 | 100.0 |" in md


def test_samples_csv_holds_every_process_of_every_sample(tmp_path):
    from loadtests.soak_report import write_samples

    samples = _samples(
        {1: [("gateway", 100 * MIB, 10)] * 3, 2: [("raylet", 50 * MIB, 20), None, None]}
    )
    write_samples(samples, tmp_path / "samples.csv")
    lines = (tmp_path / "samples.csv").read_text().splitlines()
    assert lines[0] == "t_s,pid,role,rss_mib,fds" and len(lines) == 1 + 4
    assert (
        lines[1:3] == ["0.0,1,gateway,100.0,10", "0.0,2,raylet,50.0,20"]
        and lines[-1] == "10.0,1,gateway,100.0,10"
    )
