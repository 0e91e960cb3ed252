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
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            # a file from the Secret's volume, re-read when it changes (issue 45); never a subPath,
            # which Kubernetes does not update
            path = env["KRONOS_API_KEYS_FILE"]["value"]
            mount = _mount_of(pod, path)
            assert mount is not None and "subPath" not in mount, container["name"]
            assert volumes[mount["name"]]["secret"]["secretName"] == "kronos-api-keys"
            assert path == mount["mountPath"].rstrip("/") + "/keys"  # the Secret's key `keys`
            assert "KRONOS_API_KEYS" not in env  # an environment variable cannot change
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
    (policy,) = [d for d in _docs("kuberay-rayservice.yaml")
                 if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "kronos-head"]
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
    # the service-down alert depends on no job name (issue 45: the annotation-based scrape names
    # its job otherwise, and a head pod gone takes its target away instead of reading up == 0)
    (down,) = [r for r in _rules() if r["alert"] == "KronosServiceDown"]
    assert down["expr"].startswith("absent(") and "job" not in down["expr"]


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
    # every alert added for issues 28 and 45 has test cases
    cases = (DEPLOY / "prometheus-rules.test.yml").read_text()
    for alert in (
        "KronosQueueBacklog", "KronosReplicasNotReady", "KronosNoReplicaReady",
        "KronosLedgerWriteFailures", "KronosServiceDown", "KronosLedgerVolumeFull",
        "KronosNothingScored",
    ):
        assert f"alertname: {alert}" in cases, alert


def _all_pod_templates() -> list[tuple[str, dict]]:
    """(where, pod spec) of every pod template of every manifest in deploy/."""
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {})
            cluster = spec.get("rayClusterConfig") or spec.get("rayClusterSpec")
            if cluster:
                found.append((f"{path.name} head", cluster["headGroupSpec"]["template"]["spec"]))
                found += [
                    (f"{path.name} {g['groupName']}", g["template"]["spec"])
                    for g in cluster["workerGroupSpecs"]
                ]
            elif "template" in spec:  # a Deployment, Job, ...
                found.append((f"{path.name} {doc['metadata']['name']}", spec["template"]["spec"]))
    return found


def test_every_pod_template_is_hardened():
    """Issue 45: no securityContext anywhere. Every pod template of every manifest runs as a
    non-root user with the runtime's seccomp profile and no service-account token; every
    container drops all capabilities, cannot escalate, and has a read-only root file system
    with /tmp (Ray's session folder) on an emptyDir."""
    pods = _all_pod_templates()
    assert {w.split()[0] for w, _ in pods} >= {"kuberay-rayservice.yaml", "kuberay-rayjob.yaml"}
    assert len(pods) >= 4
    for where, pod in pods:
        assert pod.get("automountServiceAccountToken") is False, where
        ctx = pod["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0, where
        assert ctx["seccompProfile"]["type"] == "RuntimeDefault", where
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            name = f"{where} {container['name']}"
            sec = container["securityContext"]
            assert sec["allowPrivilegeEscalation"] is False, name
            assert sec.get("privileged", False) is False, name
            assert sec["capabilities"]["drop"] == ["ALL"] and not sec["capabilities"].get("add")
            assert sec["readOnlyRootFilesystem"] is True, name
            tmp = _mount_of(pod, "/tmp/ray")
            assert tmp is not None and "emptyDir" in volumes[tmp["name"]], name


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cuda"])
def test_every_image_runs_as_a_non_root_user(dockerfile):
    text = (ROOT / dockerfile).read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users, f"{dockerfile} sets no USER: it runs as root"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root"), user
    assert user.isdigit(), "numeric, so that runAsNonRoot can verify it"
    pods = _all_pod_templates()
    assert {str(p["securityContext"]["runAsUser"]) for _, p in pods} == {user}
    # the user can write the default ledger folder (the bundled store's is in the code)
    assert re.search(r"^ENV .*KRONOS_LEDGER_DIR=/home/", text, re.M)


def test_disruption_budgets_network_policies_upgrade_strategy_and_volumes():
    service, args = _rayservice()
    assert service["spec"]["upgradeStrategy"]["type"] == "NewCluster"
    docs = _docs("kuberay-rayservice.yaml")
    cluster = service["spec"]["rayClusterConfig"]
    head_labels = cluster["headGroupSpec"]["template"]["metadata"]["labels"]
    templates = [head_labels] + [g["template"]["metadata"]["labels"]
                                 for g in cluster["workerGroupSpecs"]]

    def selects(selector: dict, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for labels in templates:  # every pod group has a budget that keeps it
        held = [b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], labels)]
        assert held and all(b["spec"].get("minAvailable", 0) >= 1 for b in held), labels
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for labels in templates:  # every pod group admits only what a policy names
        assert any(selects(p["spec"]["podSelector"]["matchLabels"], labels) for p in policies)
    (workers,) = [p for p in policies if p["metadata"]["name"] == "kronos-workers"]
    (rule,) = workers["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"kronos.io/cluster": "true"}}}]
    # the claims every manifest mounts have manifests; the ledger's survives two clusters at once
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for _, pod in _all_pod_templates() for v in pod["volumes"] if "persistentVolumeClaim" in v
    }
    pvcs = {d["metadata"]["name"]: d for d in _docs("volumes.yaml")
            if d["kind"] == "PersistentVolumeClaim"}
    assert claims == set(pvcs), (claims, set(pvcs))
    assert pvcs["kronos-ledger"]["spec"]["accessModes"] == ["ReadWriteMany"]
