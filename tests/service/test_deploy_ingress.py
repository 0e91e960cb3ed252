"""Ingress where the gateways are (issue 19): no deploy file and no ``kronos serve`` starts
Serve's HTTP proxies on the GPU workers, and the KubeRay Services select the head only."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _kuberay() -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kuberay-rayservice.yaml").read_text()) if d]


def _serve_configs() -> dict[str, dict]:
    configs = {name: yaml.safe_load((DEPLOY / name).read_text())
               for name in ("serve_config.yaml", "serve_config_4gpu.yaml")}
    (service,) = [d for d in _kuberay() if d["kind"] == "RayService"]
    configs["kuberay-rayservice.yaml"] = yaml.safe_load(service["spec"]["serveConfigV2"])
    return configs


def test_no_deploy_file_starts_proxies_on_every_node():
    for name, config in _serve_configs().items():
        assert config.get("proxy_location") == "HeadOnly", name
    for path in DEPLOY.glob("*.yaml"):
        assert "EveryNode" not in path.read_text(), path.name


def test_kuberay_services_select_the_head_only():
    docs = _kuberay()
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    head_labels = cluster["headGroupSpec"]["template"]["metadata"]["labels"]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    ingress = services["kronos-ingress"]["spec"]
    assert ingress["selector"] == {
        "kronos.io/ingress": "true", "ray.io/node-type": "head", "ray.io/serve": "true",
    }
    assert [p["port"] for p in ingress["ports"]] == [8000]
    for name, svc in services.items():  # every Service selects a label only the head carries
        selector = svc["spec"]["selector"]
        assert selector.get("ray.io/node-type") == "head", name
        assert all(
            head_labels.get(k) == v for k, v in selector.items() if k.startswith("kronos.io/")
        ), name
    for group in cluster["workerGroupSpecs"]:
        template = group["template"]
        assert "kronos.io/ingress" not in (template.get("metadata") or {}).get("labels", {}), group[
            "groupName"
        ]
        # KubeRay's default worker readiness probe checks the (absent) proxy, which keeps the GPU
        # workers out of KubeRay's own kronos-serve-svc: an explicit probe would drop that check
        for container in template["spec"]["containers"]:
            assert "readinessProbe" not in container, group["groupName"]
    # the gateways are pinned to the head's custom resource
    args = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    assert args["gateway_resource"] in cluster["headGroupSpec"]["rayStartParams"]["resources"]


def test_kronos_serve_starts_the_proxy_on_the_head_only(monkeypatch):
    import ray
    from ray import serve

    from service import cli
    from service.common.settings import Settings

    calls: dict = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(serve, "start", lambda **kw: calls.setdefault("start", kw))
    monkeypatch.setattr(serve, "run", lambda *a, **kw: calls.setdefault("run", kw))
    monkeypatch.setattr("service.app.build_app", lambda settings: "app")
    url = cli.start(Settings(port=8123))
    assert url == "http://127.0.0.1:8123"
    assert calls["start"]["proxy_location"] == "HeadOnly"
    assert calls["start"]["http_options"] == {"host": "127.0.0.1", "port": 8123}


def test_serve_proxy_gets_patience_on_a_loaded_machine_unless_set():
    """Serve's 5 s proxy readiness check failed serve.start on a loaded 2-core machine; kronos
    serve lengthens it (and the health check) before Ray starts, leaving a caller's value."""
    from service.cli import SERVE_PROXY_PATIENCE, patient_proxy_env

    env = {"RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "7"}
    patient_proxy_env(env)
    assert env["RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"] == "7"
    assert float(env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"]) >= 30
    assert set(SERVE_PROXY_PATIENCE) == set(env)
