"""``kronos serve``: the embedded service (local Ray, bundled model and sample store,
HTTP on 127.0.0.1:8000), or pointed elsewhere by flags / ``KRONOS_*`` / ``RAY_ADDRESS``."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import threading
import time

log = logging.getLogger(__name__)

# flag -> Settings field
_FLAGS = {
    "model_dir": (
        "--model-dir", str,
        "checkpoint folder, Hub id, alias (kronos-mini|kronos-small|kronos-base) or a "
        "folder with model/ and tokenizer/ (default: the bundled model)",
    ),
    "tokenizer_dir": (
        "--tokenizer-dir", str, "tokenizer folder or Hub id (default: the model's own)",
    ),
    "model_revision": ("--revision", str, "Hub revision of the model"),
    "dtype": ("--dtype", str, "engine precision: float32 | bfloat16 | float16"),
    "sliding": ("--sliding", str, "window past max_context: exact | rolling | recompute"),
    "store_dir": ("--store", str, "Arrow K-line store folder (default: bundled sample store)"),
    "ledger_dir": ("--ledger", str, "forecast ledger folder, or off (default: beside the store)"),
    "ray_address": (
        "--ray-address", str, "running Ray cluster (default: RAY_ADDRESS, else a local Ray)",
    ),
    "num_replicas": ("--replicas", int, "predictor replicas (default: #GPUs, else 1)"),
    "gateway_replicas": (
        "--gateway-replicas", int, "ingress (gateway) replicas on this node (default 1)",
    ),
    "device": ("--device", str, "auto | cpu | cuda"),
    "device_budget_bytes": ("--device-budget", int, "bytes one replica may use per batch"),
    "replica_cpus": ("--replica-cpus", float, "CPUs (torch threads) per CPU replica"),
    "cpu_step_loops": (
        "--cpu-step-loops", int, "step loops per CPU replica (default and most: one per CPU)",
    ),
    "cpu_step_loop_mode": (
        "--cpu-step-loop-mode", str, "process (default) or thread: where a CPU replica's loops run",
    ),
    "max_inflight_requests": (
        "--max-inflight", int, "forecast requests in flight per gateway replica before 503",
    ),
    "max_context": ("--max-context", int, "model context in candles"),
    "host": ("--host", str, "HTTP bind address (default 127.0.0.1)"),
    "port": ("--port", int, "HTTP port (default 8000)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for dest, (flag, typ, help_text) in _FLAGS.items():
        parser.add_argument(
            flag, dest=dest, type=typ, default=None, help=help_text + "; env KRONOS_" + dest.upper()
        )
    parser.add_argument("--compile", dest="compile", action="store_true", default=None,
                        help="torch.compile the engine's decode step; env KRONOS_COMPILE")
    parser.add_argument(
        "--cuda-graphs", dest="cuda_graphs", action="store_true", default=None,
        help="CUDA graphs for the decode step (ignored on a CPU); env KRONOS_CUDA_GRAPHS",
    )


def check_model(settings) -> str | None:
    """Load the configured model once, before Ray starts, so a bad path or an offline Hub id
    fails in seconds with the loader's own message. Returns that message, or None when fine."""
    from kronos_core.loading import load_checkpoints
    from kronos_core.model import CheckpointError

    try:
        cfg = settings.predictor_config(device="cpu")
        loaded = load_checkpoints(cfg)
    except (CheckpointError, ValueError, OSError) as exc:
        return str(exc)
    if settings.calibration:
        from service.replica.loop_worker import load_calibration

        try:
            load_calibration(settings.calibration, loaded.identity)
        except ValueError as exc:  # CalibrationError / CalibrationMismatch
            return str(exc)
    log.info("model %s (sha256 %s), context %d", loaded.identity.name, loaded.identity.sha256[:12],
             loaded.max_context)
    return None


def port_holder(host: str, port: int) -> str | None:
    """What already listens on ``host:port``, or None when the port is free to bind.

    Ray Serve's proxy binds with SO_REUSEPORT, so a second service on a busy port would start
    and share the port with the first (requests then alternate between the two). A plain test
    bind (SO_REUSEADDR only, so that connections of a stopped service in TIME_WAIT do not count)
    fails on a port another process listens on. The answer names the holder when it can be
    found ("pid 1234 (ray::ProxyActor)"), else just "in use". An address this machine cannot
    bind at all (not one of its own) is left to Ray to report."""
    import errno
    import socket

    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return None
    for family, kind, proto, _name, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return _listener(port) or "in use"
    return None


def _listener(port: int) -> str | None:
    """"pid N (name)" of a process listening on TCP ``port``, when psutil can see it."""
    import psutil

    try:
        pids = {c.pid for c in psutil.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except (psutil.Error, OSError):  # e.g. AccessDenied on macOS without root
        return None
    held = []
    for pid in sorted(pids):
        try:
            held.append(f"pid {pid} ({psutil.Process(pid).name()})")
        except psutil.Error:
            held.append(f"pid {pid}")
    return ", ".join(held) or None


def settings_from_args(args: argparse.Namespace):
    from service.common.settings import Settings

    overrides = {
        k: getattr(args, k)
        for k in [*_FLAGS, "compile", "cuda_graphs"]
        if getattr(args, k, None) is not None
    }
    return Settings(**overrides)


# Serve's HTTP proxies run on the head only, where the gateways are, never on the GPU workers:
# a worker node lost would drop every request that entered through its proxy (issue 19).
PROXY_LOCATION = "HeadOnly"

# Serve gives its proxy 5 s to say it is ready and 10 s to answer a health check; a 2-core machine
# busy with other work (a training run, a test suite) misses those, and Serve then kills the proxy
# and serve.start fails ("ProxyActor ... killed by ray.kill"). Longer defaults, inherited by a
# local Ray this process starts; a variable already set wins.
SERVE_PROXY_PATIENCE = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30",
}


def patient_proxy_env(environ=os.environ) -> None:
    """Set :data:`SERVE_PROXY_PATIENCE` where unset (before Ray starts)."""
    for name, value in SERVE_PROXY_PATIENCE.items():
        environ.setdefault(name, value)


def start(settings):
    """Start Ray (or connect), Serve's HTTP proxy (on the head node only) and the app. Returns
    the base URL."""
    import ray
    from ray import serve

    from service.app import build_app
    from service.request_log import PROXY_CALLBACK, PROXY_CALLBACK_ENV

    # Serve's proxy (started by this Ray, which inherits the variable) refuses unsafe request ids
    os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)
    patient_proxy_env()
    if not ray.is_initialized():
        if settings.ray_address:
            ray.init(address=settings.ray_address, namespace="kronos", log_to_driver=False)
        else:
            ray.init(namespace="kronos", include_dashboard=False, log_to_driver=False)
    serve.start(
        proxy_location=PROXY_LOCATION, http_options={"host": settings.host, "port": settings.port}
    )
    # serve.run starts Serve again, finds it running and logs that "New http_options ... will not
    # be applied": true of its own empty options, misleading after the start above, so dropped
    quiet = _DropLine("will not be applied")
    serve_log = logging.getLogger("ray.serve")
    serve_log.addFilter(quiet)
    try:
        serve.run(build_app(settings), name=settings.app_name, route_prefix="/", blocking=False)
    finally:
        serve_log.removeFilter(quiet)
    return f"http://{settings.host}:{settings.port}"


class _DropLine(logging.Filter):
    """Drops the log records whose message holds ``text``."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def exit_watchdog(deadline: float, exit_now=None) -> threading.Thread:
    """A daemon thread that ends the process at ``deadline`` (``time.monotonic()``) if it is
    still running then: Serve's and Ray's teardown can outlast the shutdown grace on a loaded
    machine, and the budget (grace + ``EXIT_MARGIN_S``, inside the pod's termination period)
    must hold. ``exit_now``: what ends it (default ``os._exit(0)`` after flushing)."""

    def _exit() -> None:
        print("shutdown budget spent: exiting without waiting for Ray's teardown", flush=True)
        sys.stderr.flush()
        os._exit(0)

    def watch() -> None:
        time.sleep(max(0.0, deadline - time.monotonic()))
        (exit_now or _exit)()

    thread = threading.Thread(target=watch, name="kronos-exit-watchdog", daemon=True)
    thread.start()
    return thread


def metrics_url(settings) -> str:
    """Where ``/metrics`` is served: the internal metrics port when one is set, else the API
    port."""
    port = settings.metrics_port or settings.port
    return f"http://{settings.host}:{port}/metrics"


def gateway_handle(settings):
    """The gateway's Serve handle (made once the app runs, so that a drain starts at once), or
    None."""
    from ray import serve

    try:
        return serve.get_app_handle(settings.app_name)
    except Exception as exc:
        log.warning("no handle on the gateway (%s)", type(exc).__name__)
        return None


def drain(
    settings, force: threading.Event | None = None, handle=None, started: float | None = None
) -> int:
    """Stop taking work at the gateway (new requests: 503, /readyz: not ready) and wait for
    the requests in flight to finish; ``force`` (a second signal) stops waiting. The gateways
    cut what still runs ``stop_reserve`` seconds before the grace (counted from ``started``,
    the signal's ``time.monotonic()``) is over, so the wait ends by then. Returns the requests
    still in flight when it stopped waiting."""
    from ray import serve

    from service.lifecycle import stop_reserve

    started = time.monotonic() if started is None else started
    grace = settings.shutdown_grace_s
    try:
        handle = handle or serve.get_app_handle(settings.app_name)
        active = int(handle.drain.remote().result(timeout_s=min(30.0, max(1.0, grace / 2))))
    except Exception as exc:  # the app never came up, or is gone already
        log.warning("drain: gateway unreachable (%s); stopping at once", type(exc).__name__)
        return 0
    # the cut answers leave the gateways within about a second of the cut: wait for them too
    deadline = started + grace - stop_reserve(grace) / 2
    if active:
        print(
            f"draining: {active} request(s) in flight, new ones get 503; waiting up to "
            f"{max(0.0, deadline - time.monotonic()):.0f} s, then the rest is answered 503 with "
            "what is done (signal again to stop at once)", flush=True,
        )
    while active and time.monotonic() < deadline and not (force and force.is_set()):
        time.sleep(0.2)
        try:
            active = int(handle.in_flight.remote().result(timeout_s=10))
        except Exception:
            break
    if active:
        print(f"grace period over: {active} request(s) still in flight are dropped", flush=True)
    else:
        # the proxy hands the last over
        time.sleep(min(1.0, max(0.0, started + grace - time.monotonic() - 2)))
    return active


def local_metrics_dir(settings) -> str | None:
    """The gateways' shared metrics folder when ``kronos serve`` started Ray itself (one node:
    this one), to remove after the stop; None on a cluster given by address, which outlives us."""
    import ray

    if settings.ray_address or not ray.is_initialized():
        return None
    return settings.gateway_shared_dir(ray.get_runtime_context().get_node_id())


def stop(settings=None, deadline: float | None = None) -> bool:
    """Stop the app, then Ray (``settings``: those the app was started with; default ones
    when not given: the embedded service). ``deadline`` (``time.monotonic()``): Ray is shut
    down by then even if Serve is still stopping the app (the shutdown grace is spent).
    Returns False when Serve was given up on that way (the caller should exit at once: a
    Serve call still blocked would hold the interpreter's exit on Ray's dead connections).

    Embedded (a local Ray, no ``ray_address``): delete the app, whose replicas stop as Serve
    stops them (``graceful_shutdown_timeout_s``), then ``ray.shutdown()``, which disconnects
    this driver and then ends the rest of the local Ray, Serve's controller and proxy with it.
    ``serve.shutdown()`` is not used there: it has the controller kill itself while this
    driver still waits on two of its calls (``graceful_shutdown`` returns only through that
    death, and a handle's long poll is pending), and Ray reports each as ``Task
    ServeController.graceful_shutdown failed ... killed by ray.kill`` on every clean stop.
    On a cluster given by address, ``serve.shutdown()`` stays: the service's proxies bind
    the port on the cluster's nodes and must go with it."""
    import ray
    from ray import serve

    from service.common.settings import Settings
    from service.replica.weights import release_all

    settings = settings or Settings()
    clean = True
    try:
        if not ray.is_initialized():  # else a Serve call would start a Ray instance to shut down
            return clean
        if settings.ray_address:
            serve.shutdown()
            release_all()  # the weight stores this process shipped (detached: a cluster keeps them)
            return clean
        clean = _delete_app(settings.app_name, deadline)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return clean


def requires(args) -> list:
    """The ``serve`` extra (checked before Ray starts)."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(SERVE_MODULES)


def _delete_app(app_name: str, deadline: float | None) -> bool:
    """``serve.delete(app_name)``, given up on at ``deadline`` (Ray's shutdown then ends it).
    False when it was given up on (its thread is still blocked in Serve)."""
    from ray import serve

    def delete():
        try:
            serve.delete(app_name)
        except Exception as exc:  # Serve never came up: nothing to delete, Ray goes anyway
            log.warning("stopping the app: %s", exc)

    if deadline is None:
        delete()
        return True
    worker = threading.Thread(target=delete, name="kronos-serve-delete", daemon=True)
    worker.start()
    worker.join(timeout=max(0.5, deadline - time.monotonic()))
    if worker.is_alive():
        print("the app did not stop within the grace; shutting Ray down with it", flush=True)
        return False
    return True


def preflight(args: argparse.Namespace):
    """The settings of ``args``, checked before anything starts: the settings themselves, the API
    keys, a public bind without keys, the metrics port, the ledger folder, ports in use, the model.
    Returns the settings, or None after printing the problem (``kronos serve`` then exits 2)."""
    from pydantic import ValidationError

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        from service.common.settings import describe_settings_error

        flags = {field: spec[0] for field, spec in _FLAGS.items()}
        print(
            f"kronos serve: invalid settings: {describe_settings_error(exc, flags)}",
            file=sys.stderr,
        )
        return None
    from service.common.settings import unknown_kronos_variables

    for message in unknown_kronos_variables():
        print(f"WARNING: {message}", file=sys.stderr, flush=True)
    from service.auth import KeyFileError, load_keyring

    try:
        keys = load_keyring(settings)
    except KeyFileError as exc:
        print(f"kronos serve: invalid API keys: {exc}", file=sys.stderr)
        return None
    from service.preflight import (
        LEDGER_OFF_NOTE,
        ledger_problem,
        metrics_port_problem,
        public_bind_problem,
    )

    for problem in (
        public_bind_problem(settings, keys.enabled), metrics_port_problem(settings),
        ledger_problem(settings),
    ):
        if problem:
            print(f"kronos serve: {problem}", file=sys.stderr)
            return None
    if settings.resolved_ledger_dir() is None:
        print(f"NOTE: {LEDGER_OFF_NOTE}", file=sys.stderr, flush=True)
    if not keys.enabled and settings.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"WARNING: kronos serve listens on {settings.host} with no API keys "
            "(KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS): anyone who can reach this port can run forecasts",
            file=sys.stderr, flush=True,
        )
    # a cluster given by address binds on its own nodes
    ports = (("--port, KRONOS_PORT", settings.port), ("KRONOS_METRICS_PORT", settings.metrics_port))
    for flag, port in ports if not settings.ray_address else ():
        holder = port_holder(settings.host, port) if port else None
        if holder:
            held = "in use" if holder == "in use" else f"in use by {holder}"
            print(
                f"kronos serve: port {port} on {settings.host} is {held}; stop that "
                f"service or choose another port ({flag})", file=sys.stderr,
            )
            return None
    problem = check_model(settings)
    if problem:
        print(f"kronos serve: cannot load the model: {problem}", file=sys.stderr)
        return None
    return settings


def run(args: argparse.Namespace) -> int:
    """``kronos serve``: the preflight checks (exit 2), then the service until a signal, then a
    drain within the grace (docs/operations.md, "Graceful shutdown")."""
    settings = preflight(args)
    if settings is None:
        return 2
    stop_event, force = threading.Event(), threading.Event()
    handle = scratch = None

    signalled: list[float] = []  # time.monotonic() of the first signal: the grace counts from it

    def _stop(signum, _frame):
        log.info("signal %s: shutting down", signum)
        if not signalled:
            signalled.append(time.monotonic())
        (force if stop_event.is_set() else stop_event).set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        url = start(settings)
        # Ray's core worker installs its own SIGTERM handler in ray.init (a stack dump, then the
        # process dies mid-request): take the signals back so that they drain instead
        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        handle = gateway_handle(settings)
        scratch = local_metrics_dir(settings)
        if not stop_event.is_set():
            print(
                f"Kronos service listening on {url}  (docs {url}/docs, metrics "
                f"{metrics_url(settings)}); Ctrl-C stops it",
                flush=True,
            )
        while not stop_event.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping Kronos service...", flush=True)
        from service.lifecycle import EXIT_MARGIN_S, stop_reserve

        began = signalled[0] if signalled else time.monotonic()
        exit_watchdog(began + settings.shutdown_grace_s + EXIT_MARGIN_S)
        if stop_event.is_set():
            drain(settings, force, handle, began)
        if scratch is not None:  # this process's own Ray, its gateways drained: their metric
            # files and drain marker go now, before a stop that Ray may end abruptly
            shutil.rmtree(scratch, ignore_errors=True)
        # Serve and Ray stop within the grace: a third of the reserve is left for Ray and the exit
        clean = stop(
            settings,
            began + settings.shutdown_grace_s - stop_reserve(settings.shutdown_grace_s) / 3,
        )
        if scratch is not None:  # what the gateways wrote while they stopped
            shutil.rmtree(scratch, ignore_errors=True)
        print("stopped", flush=True)
        if not clean:  # a Serve call still blocked would hold the exit past the grace
            sys.stderr.flush()
            os._exit(0)
    return 0
