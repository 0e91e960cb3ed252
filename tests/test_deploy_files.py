"""The deploy files as shipped (issue 28), read from the real files: the KubeRay manifest keeps
the ledger on its own writable volume, takes its API keys from a Secret, pins its image, asks
for what it limits, gives Ray a /dev/shm, fits the shutdown budget, serves /metrics on the
port the Service and the ServiceMonitor scrape; the alert rules pass promtool's own tests; and
every series a panel or an alert reads exists from the start."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from service.common.settings import Settings
from service.lifecycle import pod_termination_s

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _rayservice() -> tuple[dict, dict]:
    (service,) = [d for d in _docs("kuberay-rayservice.yaml") if d["kind"] == "RayService"]
    args = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    return service, args


def _pods() -> list[dict]:
    service, _ = _rayservice()
    cluster = service["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]
    ]


def _head() -> dict:
    return _pods()[0]


def _mount_of(pod: dict, path: str) -> dict | None:
    """The volume mount of the pod's first container that holds ``path``."""
    mounts = pod["containers"][0].get("volumeMounts", [])
    held = [
        m
        for m in mounts
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    return max(held, key=lambda m: len(m["mountPath"])) if held else None


def test_the_ledger_has_its_own_writable_volume_on_the_gateways_node():
    _, args = _rayservice()
    settings = Settings(**args)
    ledger = settings.resolved_ledger_dir()
    assert ledger is not None and not ledger.startswith(settings.resolved_store_dir())
    mount = _mount_of(_head(), ledger)
    assert mount is not None and not mount.get("readOnly", False), mount
    volumes = {v["name"]: v for v in _head()["volumes"]}
    assert "persistentVolumeClaim" in volumes[mount["name"]]  # survives the pod
    store = _mount_of(_head(), settings.resolved_store_dir())
    assert store is not None and store["readOnly"] and store["name"] != mount["name"]


def test_api_keys_come_from_a_secret_on_every_pod_and_the_public_bind_needs_them():
    from service.preflight import public_bind_problem

    _, args = _rayservice()
    settings = Settings(**args)
    assert settings.host == "0.0.0.0" and not settings.allow_public_without_keys
    assert public_bind_problem(settings, keys_enabled=False)  # without the Secret: refused
    assert public_bind_problem(settings, keys_enabled=True) is None
    for pod in _pods():
        for container in pod["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            ref = env["KRONOS_API_KEYS"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "kronos-api-keys", container["name"]
    readme = (DEPLOY / "README.md").read_text()
    assert "kronos-api-keys" in readme and "kubectl create secret" in readme


def test_the_image_is_pinned_to_the_project_version():
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    version = found.group(1)
    images = [c["image"] for pod in _pods() for c in pod["containers"]]
    assert images and all(img.rsplit(":", 1)[1] == version for img in images), images


def test_every_container_requests_what_it_limits_and_ray_has_a_shm_volume():
    for pod in _pods():
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            res = container["resources"]
            assert set(res["requests"]) == set(res["limits"]), container["name"]
            shm = _mount_of(pod, "/dev/shm")
            assert shm is not None and volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"


def test_the_termination_period_is_the_grace_plus_the_margin():
    _, args = _rayservice()
    grace = Settings(**args).shutdown_grace_s
    assert [p["terminationGracePeriodSeconds"] for p in _pods()] == [
        pod_termination_s(grace)
    ] * len(_pods())


def test_no_worker_group_claims_bounds_it_cannot_scale_to():
    service, _ = _rayservice()
    cluster = service["spec"]["rayClusterConfig"]
    autoscaling = cluster.get("enableInTreeAutoscaling", False)
    for group in cluster["workerGroupSpecs"]:
        if not autoscaling:
            assert "maxReplicas" not in group and "minReplicas" not in group, group["groupName"]


def test_the_dashboard_port_is_open_to_the_operator_only():
    (policy,) = [d for d in _docs("kuberay-rayservice.yaml") if d["kind"] == "NetworkPolicy"]
    head_labels = _rayservice()[0]["spec"]["rayClusterConfig"]["headGroupSpec"]["template"][
        "metadata"
    ]["labels"]
    assert all(
        head_labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items()
    )
    dashboard = [
        rule for rule in policy["spec"]["ingress"] if {"port": 8265} in rule.get("ports", [])
    ]
    assert len(dashboard) == 1
    (peer,) = dashboard[0]["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "kuberay-operator"}
    # the rule that opens every port admits the cluster's own pods only
    open_rules = [rule for rule in policy["spec"]["ingress"] if "ports" not in rule]
    assert [r["from"] for r in open_rules] == [
        [{"podSelector": {"matchLabels": {"kronos.io/cluster": "true"}}}]
    ]


def test_metrics_are_scraped_where_the_gateways_serve_them():
    service, args = _rayservice()
    port = Settings(**args).metrics_port
    assert port is not None and port != Settings(**args).port
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    (svc,) = [d for d in _docs("kuberay-rayservice.yaml") if d["kind"] == "Service"
              and d["metadata"]["name"] == "kronos-metrics"]
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] == port
    (monitor,) = _docs("servicemonitor.yaml")
    assert monitor["kind"] == "ServiceMonitor"
    labels = svc["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [svc_port["name"]]
    # the alert on a target down matches the ServiceMonitor's job (the Service's name)
    rules = (DEPLOY / "prometheus-rules.yml").read_text()
    assert svc["metadata"]["name"] in rules


def _rules() -> list[dict]:
    return [
        r
        for g in yaml.safe_load((DEPLOY / "prometheus-rules.yml").read_text())["groups"]
        for r in g["rules"]
    ]


def test_every_series_a_panel_or_an_alert_reads_exists_from_the_start():
    from prometheus_client.parser import text_string_to_metric_families

    from service.common.metrics import Metrics

    m = Metrics()
    m.set_limits(64, 4)
    m.touch_replica("r1")  # a replica the gateway has seen (its readiness probe), before any batch
    exported = {
        s.name
        for fam in text_string_to_metric_families(m.exposition().decode())
        for s in fam.samples
    }
    dashboard = (DEPLOY / "grafana-dashboard.json").read_text()
    rules = "\n".join(r["expr"] for r in _rules())
    counters = set(re.findall(r"kronos_\w+_total", dashboard + rules))
    assert (
        "kronos_oom_splits_total" in counters and "kronos_ledger_write_failures_total" in counters
    )
    assert counters <= exported, sorted(counters - exported)
    # gauges and histograms: their names (labels come with the work)
    named = {n for n in re.findall(r"kronos_\w+", dashboard + rules)}
    bare = {re.sub(r"_(bucket|sum|count)$", "", n) for n in named}
    families = {fam.name for fam in text_string_to_metric_families(m.exposition().decode())}
    assert {n for n in bare if not n.endswith("_total")} <= families | {
        n + "_total" for n in families
    }


def test_every_alert_has_a_runbook_in_docs_operations():
    ops = (ROOT / "docs" / "operations.md").read_text()
    headings = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
                for h in re.findall(r"^###? (.+)$", ops, re.M)}
    for rule in _rules():
        name = rule["alert"]
        assert name.lower() in headings, f"docs/operations.md has no runbook section '### {name}'"
        assert rule["annotations"]["runbook"] == f"docs/operations.md#{name.lower()}"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path:
        return path
    msg = (
        "`promtool` not found: apt-get install -y prometheus (scripts/ci-services.sh does it in CI)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg)
    pytest.skip(msg)


def test_promtool_checks_the_rules_and_runs_their_tests():
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", "prometheus-rules.yml"], cwd=DEPLOY,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run([promtool, "test", "rules", "prometheus-rules.test.yml"], cwd=DEPLOY,
                           capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    # every alert added for issue 28 has test cases
    cases = (DEPLOY / "prometheus-rules.test.yml").read_text()
    for alert in (
        "KronosQueueBacklog", "KronosReplicasNotReady", "KronosNoReplicaReady",
        "KronosLedgerWriteFailures",
    ):
        assert f"alertname: {alert}" in cases, alert
