"""``kronos soak``: a long locust run at a steady load against a local Kronos service, which
samples the resident memory and open file descriptors of every service process, optionally
kills a random predictor replica every N seconds, and writes a JSON and Markdown summary.

    kronos soak --duration 600 --users 3 --symbols 100 --out loadtests/results/soak-plain
    kronos soak --duration 600 --users 3 --symbols 100 --chaos-every 60 --out
    loadtests/results/soak-chaos kronos soak --host http://127.0.0.1:8000 ... # attach to a running
    service (loopback only) python -m loadtests.soak ... # the same

Passes (exit 0) when no request failed (503/429 with Retry-After are counted apart, as shed),
no series was lost to an unavailable replica, every process alive from warm-up to the end kept
its RSS within ``--rss-tolerance`` percent and its open FDs from growing, and, with chaos, every
kill was survived and the replicas all ran again at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

from loadtests import soak_probe
from loadtests.run import LOOPBACK, add_key_argument, check_key, start_service, stop_service

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host", default=None,
        help="running service (loopback only); default: start `kronos serve`",
    )
    p.add_argument(
        "--root-pid", type=int, default=None,
        help="with --host: the pid that started the service's Ray (default: found from the port)",
    )
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load (at most 600)")
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds of load before memory and FDs count as the baseline")
    p.add_argument(
        "--users", type=int, default=3, help="locust users (closed loop: each waits for its answer)"
    )
    p.add_argument("--spawn-rate", type=float, default=1.0)
    p.add_argument("--symbols", type=int, default=100, help="symbols per forecast request")
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--lookback", type=int, default=128)
    p.add_argument(
        "--wait", default="0.5,1.5", help="each user's pause between requests: 'min,max' seconds"
    )
    p.add_argument("--request-timeout", type=float, default=120.0,
                   help="client-side timeout of one request: a request that hangs longer fails")
    p.add_argument("--chaos-every", type=float, default=0.0,
                   help="kill a random predictor replica every this many seconds (0: no chaos)")
    p.add_argument("--seed", type=int, default=0, help="which replica the chaos kills")
    p.add_argument(
        "--sample-every", type=float, default=5.0, help="seconds between memory/FD samples"
    )
    p.add_argument(
        "--rss-tolerance", type=float, default=10.0, help="percent RSS growth allowed after warm-up"
    )
    p.add_argument(
        "--replicas", type=int, default=None, help="when starting the service (default: its own)"
    )
    p.add_argument("--app", default="kronos", help="Serve application name of the service")
    p.add_argument(
        "--out", default="soak-results", help="folder for summary.json / summary.md / locust/"
    )
    add_key_argument(p)


def _get(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def service_counts(url: str) -> dict:
    """The service's own counters from /metrics: shard retries, errors by code, forecast
    answers by HTTP status, series forecast."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {
        "shard_retries": 0.0, "series_forecast": 0.0, "errors": {}, "forecast_status": {},
    }
    for fam in text_string_to_metric_families(_get(url + "/metrics").decode()):
        for s in fam.samples:
            if s.name == "kronos_shard_retries_total":
                out["shard_retries"] += s.value
            elif s.name == "kronos_series_forecast_total":
                out["series_forecast"] += s.value
            elif s.name == "kronos_errors_total":
                out["errors"][s.labels["code"]] = out["errors"].get(s.labels["code"], 0.0) + s.value
            elif (
                s.name == "kronos_request_duration_seconds_count"
                and s.labels.get("route") == "/v1/forecast"
            ):
                st = s.labels.get("status", "?")
                out["forecast_status"][st] = out["forecast_status"].get(st, 0.0) + s.value
    return out


def counts_delta(before: dict, after: dict) -> dict:
    """``after - before`` of ``service_counts`` (keys absent before count from 0)."""
    def sub(a: dict, b: dict) -> dict:
        return {k: int(v - b.get(k, 0.0)) for k, v in sorted(a.items()) if v - b.get(k, 0.0)}

    return {"shard_retries": int(after["shard_retries"] - before["shard_retries"]),
            "series_forecast": int(after["series_forecast"] - before["series_forecast"]),
            "errors": sub(after["errors"], before["errors"]),
            "forecast_status": sub(after["forecast_status"], before["forecast_status"])}


def _start_locust(args, url: str, out: Path) -> subprocess.Popen:
    """``kronos loadtest`` in a child process (locust's gevent patches its whole process)."""
    env = dict(
        os.environ, KRONOS_LOAD_SYMBOLS=str(args.symbols), KRONOS_LOAD_HORIZON=str(args.horizon),
        KRONOS_LOAD_LOOKBACK=str(args.lookback), KRONOS_LOAD_WAIT_S=args.wait,
        KRONOS_LOAD_TIMEOUT_S=str(args.request_timeout), GEVENT_SUPPORT="True",
    )
    log_file = open(out / "locust.log", "w")  # noqa: SIM115 (closed with the process by the OS)
    return subprocess.Popen(
        [sys.executable, "-m", "loadtests.run", "--host", url, "--users", str(args.users),
         "--spawn-rate", str(args.spawn_rate), "--run-time", f"{args.duration:g}s",
         "--out", str(out / "locust"), "--min-ok", "0",
         "--stop-timeout", f"{args.request_timeout + 10:g}"],
        env=env, stdout=log_file, stderr=subprocess.STDOUT,
    )


def _watch(args, root_pid: int, locust: subprocess.Popen) -> list[soak_probe.Sample]:
    """Sample the service's processes every ``--sample-every`` s until locust is done. Attached
    to a service whose root is an ancestor of this process (a test session), the soak's own
    processes (this one, locust) are left out; a service this soak started is its child."""
    from tqdm import tqdm

    own = (
        {os.getpid()}
        if os.getpid() in {p.pid for p in psutil.Process(root_pid).children(recursive=True)}
        else set()
    )

    samples: list[soak_probe.Sample] = []
    t0 = time.monotonic()
    # the last requests, locust's own start and stop on a loaded machine
    grace = args.request_timeout + 120
    deadline = t0 + args.duration + grace
    next_sample = t0
    with tqdm(total=int(args.duration), desc="soak", unit="s", mininterval=5) as bar:
        while locust.poll() is None and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_sample:
                samples.append(soak_probe.sample_tree(root_pid, now - t0, exclude=own))
                next_sample += args.sample_every
            bar.n = min(int(now - t0), int(args.duration))
            bar.refresh()
            time.sleep(min(1.0, max(0.05, next_sample - time.monotonic())))
    if locust.poll() is None:
        locust.kill()
        raise TimeoutError(
            f"locust still running {args.duration + grace:g} s after it started; killed"
        )
    samples.append(soak_probe.sample_tree(root_pid, time.monotonic() - t0, exclude=own))
    return samples


def _attach_or_start(args) -> tuple[str, subprocess.Popen | None, int]:
    """(URL, the server process when the soak started it, root pid of the service's tree)."""
    from loadtests.soak_chaos import replicas_ready

    if args.host:
        port = urlparse(args.host).port or 80
        return args.host.rstrip("/"), None, args.root_pid or soak_probe.find_root(port)
    # a shared, loaded machine starts Ray slowly
    url, server = start_service(args.replicas, timeout=600)
    deadline = time.monotonic() + 300
    while args.replicas and replicas_ready(url) < args.replicas and time.monotonic() < deadline:
        time.sleep(1)
    return url, server, server.pid


def _soak(args, url: str, root_pid: int, out: Path) -> dict:
    """The soak itself against a ready service: returns the summary's raw parts."""
    from loadtests.soak_chaos import ChaosMonkey, gcs_address, ray_auth_settings

    before = service_counts(url)
    load_start = soak_probe.load_averages()
    chaos = None
    if args.chaos_every > 0:
        chaos = ChaosMonkey(gcs_address(root_pid), url, args.app, args.chaos_every, seed=args.seed,
                            auth=ray_auth_settings(root_pid), until_s=args.duration)
        chaos.start()
    locust = _start_locust(args, url, out)
    try:
        samples = _watch(args, root_pid, locust)
    finally:
        if locust.poll() is None:
            locust.kill()
        recovered = chaos.finish() if chaos else True
    return {
        "samples": samples, "counts": counts_delta(before, service_counts(url)),
        "load_start": load_start, "load_end": soak_probe.load_averages(),
        "locust": json.loads((out / "locust" / "summary.json").read_text()),
        "chaos": None if chaos is None else {
            "every_s": args.chaos_every, "kills": chaos.events, "errors": chaos.errors,
            "replicas_target": chaos.target, "all_recovered_at_end": recovered,
        },
    }


def requires(args: argparse.Namespace) -> list:
    """locust (the ``load`` extra), and the ``serve`` extra unless ``--host`` names a running
    service."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(["locust"]) + ([] if args.host else needs(SERVE_MODULES, "the service it starts"))


def run(args: argparse.Namespace) -> int:
    from loadtests.soak_report import summarise, write, write_samples

    if args.host and urlparse(args.host).hostname not in LOOPBACK:
        print(f"kronos soak: --host must be a loopback address, got {args.host}", file=sys.stderr)
        return 2
    if not 0 < args.duration <= 600 or not 0 <= args.warmup < args.duration:
        print(
            "kronos soak: need 0 < --duration <= 600 and 0 <= --warmup < --duration",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if args.api_key:
        os.environ["KRONOS_API_KEY"] = args.api_key  # the locust child reads it
    url, server, root_pid = _attach_or_start(args)
    try:
        refused = check_key(url, os.environ.get("KRONOS_API_KEY"), "kronos soak")
        if refused:
            print(refused, file=sys.stderr)
            return 2
        parts = _soak(args, url, root_pid, out)
    finally:
        if server is not None:
            stop_service(server)
    summary = summarise(args, parts, url=url, root_pid=root_pid, started_by_soak=server is not None,
                        started_at=started)
    write(summary, out)
    write_samples(parts["samples"], out / "samples.csv")
    return 0 if summary["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtests.soak``: ``kronos soak``, through the same command line (flags, help,
    logging)."""
    from kronos_core.cli import main as kronos_main

    return kronos_main(["soak", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
