import pytest
from prometheus_client.parser import text_string_to_metric_families

from kronos_core.base.errors import ErrorCode
from service.common.messages import BatchReport
from service.common.metrics import Metrics
from service.common.settings import Settings


def _report(replica="a", series=10):
    return BatchReport(replica, "cpu", series, 2, 1, 0, 400, 0.5, 3, 100, 200, 300)


def test_exposition_has_prefixed_metrics_and_no_double_counting():
    m = Metrics()
    m.record_batch(_report("a", 10))
    m.record_batch(_report("b", 30))
    m.record_batch(_report("a", 5))
    m.record_error("unknown_symbol", 2)
    m.request_seconds.labels(route="/v1/forecast", method="POST", status="200").observe(0.2)
    fams = {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}
    assert all(name.startswith("kronos_") for name in fams)
    counts = {
        s.labels["replica"]: s.value
        for s in fams["kronos_batch_size"].samples
        if s.name.endswith("_count")
    }
    assert counts == {"a": 2, "b": 1}
    sums = {
        s.labels["replica"]: s.value
        for s in fams["kronos_batch_size"].samples
        if s.name.endswith("_sum")
    }
    assert sums == {"a": 15, "b": 30}
    tokens = {
        s.labels["replica"]: s.value
        for s in fams["kronos_tokens_generated"].samples
        if s.name.endswith("_total")
    }
    assert tokens == {"a": 800, "b": 400}
    mem = {
        (s.labels["replica"], s.labels["kind"]): s.value
        for s in fams["kronos_device_memory_bytes"].samples
    }
    assert mem[("a", "peak")] == 300 and mem[("b", "allocated")] == 100
    errs = {
        s.labels["code"]: s.value
        for s in fams["kronos_errors"].samples
        if s.name == "kronos_errors_total"
    }
    assert errs["unknown_symbol"] == 2
    # every code's series exists from the start, at 0 (dashboards and alerts never read "no data")
    assert {c.value for c in ErrorCode} == set(errs) and sum(errs.values()) == 2
    # so do the per-replica counters of each replica seen, oom splits included
    oom = {
        s.labels["replica"]: s.value
        for s in fams["kronos_oom_splits"].samples
        if s.name.endswith("_total")
    }
    assert oom == {"a": 0, "b": 0}


def test_settings_env_and_ray_address(monkeypatch):
    monkeypatch.setenv("KRONOS_NUM_REPLICAS", "3")
    monkeypatch.setenv("KRONOS_PORT", "9001")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    s = Settings()
    assert s.num_replicas == 3 and s.port == 9001 and s.ray_address == "ray://head:10001"
    assert s.host == "127.0.0.1"


def test_settings_defaults_and_resolution(monkeypatch):
    for k in ("RAY_ADDRESS", "KRONOS_RAY_ADDRESS", "KRONOS_NUM_REPLICAS"):
        monkeypatch.delenv(k, raising=False)
    s = Settings()
    assert s.port == 8000 and s.ray_address is None
    assert s.resolved_num_replicas(num_gpus=0) == 1
    assert s.resolved_num_replicas(num_gpus=4) == 4 and s.use_gpu(4)
    assert Settings(device="cpu").resolved_num_replicas(4) == 1
    cfg = s.predictor_config()
    assert cfg.model is None and cfg.tokenizer is None  # the embedded default
    assert (cfg.dtype, cfg.sliding, cfg.compile) == ("float32", "exact", False)


def test_unknown_settings_keys_are_refused(monkeypatch):
    """A misspelled Serve-config key fails, naming it; foreign KRONOS_* variables stay ignored."""
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="devcie"):
        Settings(devcie="cpu")
    with pytest.raises(pydantic.ValidationError, match="max_inflight_request"):
        Settings.model_validate({"max_inflight_request": 3})
    monkeypatch.setenv("KRONOS_SOMETHING_ELSE", "1")
    assert Settings().port == 8000
    with pytest.raises(pydantic.ValidationError, match="dtype"):
        Settings(dtype="float64")


def test_cli_flags_override_environment(monkeypatch):
    import argparse

    from service import cli

    monkeypatch.setenv("KRONOS_PORT", "9100")
    monkeypatch.setenv("KRONOS_NUM_REPLICAS", "3")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    s = cli.settings_from_args(
        parser.parse_args(["--replicas", "2", "--store", "/data/store", "--device-budget", "1000"])
    )
    assert s.num_replicas == 2 and s.store_dir == "/data/store" and s.device_budget_bytes == 1000
    assert s.port == 9100  # not given as a flag: the environment's value
    assert cli.settings_from_args(parser.parse_args([])).num_replicas == 3


def test_serve_config_args_are_valid_settings():
    from pathlib import Path

    import yaml

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    for name in ("serve_config.yaml", "serve_config_4gpu.yaml"):
        for app in yaml.safe_load((deploy / name).read_text())["applications"]:
            assert app["import_path"] == "service.app:build_app"
            Settings(**app["args"])  # the typed builder validates its args into Settings
    Settings.model_validate({"max_inflight_requests": 5})


def test_gateway_replicas_flag_and_the_builder_pin_them():
    import argparse

    from service import cli
    from service.app import build_app

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    s = cli.settings_from_args(
        parser.parse_args(["--gateway-replicas", "3", "--device", "cpu", "--replicas", "1"])
    )
    assert s.gateway_replicas == 3
    gateway = build_app(s)._bound_deployment
    assert gateway.num_replicas == 3 and "resources" not in gateway.ray_actor_options
    pinned = build_app(
        s.model_copy(update={"gateway_resource": "kronos_gateway"})
    )._bound_deployment
    assert pinned.ray_actor_options["resources"] == {"kronos_gateway": 0.001}
    # one folder per app and Ray node under KRONOS_METRICS_DIR
    a = Settings(metrics_dir="/m").gateway_shared_dir("node-a" * 8)
    assert a.startswith("/m/kronos-") and a != Settings(metrics_dir="/m").gateway_shared_dir(
        "node-b" * 8
    )


def test_gateway_slots_default_to_what_the_replicas_run_at_once():
    """``max_inflight_requests`` unset: 2 per CPU step loop, 32 per GPU replica, split over the
    gateways (rounded up); set, it is kept (docs/results/overload.md)."""
    s = Settings()
    assert s.max_inflight_requests is None and s.inflight_limit == 32
    assert s.max_queued_requests == 128
    assert s.resolved_max_inflight(replicas=1, gpu=False, replica_cpus=2) == 4
    assert s.resolved_max_inflight(replicas=3, gpu=False, replica_cpus=4) == 24
    assert Settings(cpu_step_loops=1).resolved_max_inflight(2, False, 4) == 4  # one loop each
    assert s.resolved_max_inflight(replicas=4, gpu=True, replica_cpus=1) == 128
    assert Settings(gateway_replicas=3).resolved_max_inflight(4, True, 1) == 43  # ceil(128 / 3)
    assert Settings(max_inflight_requests=7).resolved_max_inflight(4, True, 1) == 7
