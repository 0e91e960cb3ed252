"""``kronos serve``: the embedded service (local Ray, bundled model and sample store,
HTTP on 127.0.0.1:8000), or pointed elsewhere by flags / ``KRONOS_*`` / ``RAY_ADDRESS``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

log = logging.getLogger(__name__)

# flag -> Settings field
_FLAGS = {
    "model_dir": ("--model-dir", str, "Kronos checkpoint folder or Hub id (default: bundled tiny model)"),
    "tokenizer_dir": ("--tokenizer-dir", str, "tokenizer folder or Hub id (default: bundled)"),
    "store_dir": ("--store", str, "Arrow K-line store folder (default: bundled sample store)"),
    "ray_address": ("--ray-address", str, "running Ray cluster (default: RAY_ADDRESS, else a local Ray)"),
    "num_replicas": ("--replicas", int, "predictor replicas (default: #GPUs, else 1)"),
    "device": ("--device", str, "auto | cpu | cuda"),
    "device_budget_bytes": ("--device-budget", int, "bytes one replica may use per batch"),
    "replica_cpus": ("--replica-cpus", float, "CPUs (torch threads) per CPU replica"),
    "max_inflight_requests": ("--max-inflight", int, "forecast requests in flight before 503"),
    "max_context": ("--max-context", int, "model context in candles"),
    "host": ("--host", str, "HTTP bind address (default 127.0.0.1)"),
    "port": ("--port", int, "HTTP port (default 8000)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for dest, (flag, typ, help_text) in _FLAGS.items():
        parser.add_argument(flag, dest=dest, type=typ, default=None, help=help_text + "; env KRONOS_" + dest.upper())


def settings_from_args(args: argparse.Namespace):
    from service.settings import Settings

    overrides = {k: getattr(args, k) for k in _FLAGS if getattr(args, k, None) is not None}
    base = Settings()
    return base.model_copy(update=overrides) if overrides else base


def start(settings, wait_ready: bool = True):
    """Start Ray (or connect), Serve's HTTP proxy and the app. Returns the base URL."""
    import ray
    from ray import serve

    from service.app import build_app

    if not ray.is_initialized():
        if settings.ray_address:
            ray.init(address=settings.ray_address, namespace="kronos", log_to_driver=False)
        else:
            ray.init(namespace="kronos", include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(build_app(settings), name=settings.app_name, route_prefix="/", blocking=False)
    return f"http://{settings.host}:{settings.port}"


def stop() -> None:
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        if ray.is_initialized():
            ray.shutdown()


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    stop_event = threading.Event()

    def _stop(signum, _frame):
        log.info("signal %s: shutting down", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        url = start(settings)
        if not stop_event.is_set():
            print(f"Kronos service listening on {url}  (docs {url}/docs, metrics {url}/metrics); Ctrl-C stops it",
                  flush=True)
        while not stop_event.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping Kronos service...", flush=True)
        stop()
        print("stopped", flush=True)
    return 0
