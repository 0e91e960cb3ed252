"""``kronos loadtest``: a headless locust load test against a local Kronos service; writes
JSON and Markdown summaries. The users are in ``loadtests/locustfile.py``.

    kronos loadtest                                          # starts the embedded service itself
    kronos loadtest --host http://127.0.0.1:8000 --users 16 --run-time 60s
    python -m loadtests.run ...                              # the same (older spelling)

Only loopback targets are allowed. The run time is bounded (default 30 s, at most 10 min);
``--requests N`` ends the run once N forecast requests are answered instead (the run time then
only caps it), so a slow machine makes a run slower, not shorter. With API keys on the service,
``--api-key`` (or ``KRONOS_API_KEY``); a 401/403 stops the run at once, exit 2, with the
service's answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from loadtests.report import markdown_table

log = logging.getLogger(__name__)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
RUN_TIME_DEFAULT = "30s"


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(host: str, server: subprocess.Popen, timeout: float = 180.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"kronos serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(host + "/readyz", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"service at {host} not ready after {timeout}s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host", default=None, help="running service (loopback only); default: start one"
    )
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--spawn-rate", type=float, default=4)
    p.add_argument("--run-time", default=RUN_TIME_DEFAULT, help="e.g. 30s, 2m (at most 10 min)")
    p.add_argument("--replicas", type=int, default=1, help="when starting the service")
    p.add_argument("--out", default="loadtest-results", help="folder for summary.json / summary.md")
    p.add_argument(
        "--stop-timeout", type=float, default=0,
        help="at the end, let users finish the request in flight for up to this many seconds "
        "(0: abort them, as locust does by default)",
    )
    p.add_argument("--min-ok", type=int, default=1,
                   help="fail (exit 1) unless at least this many forecast requests answered 200")
    p.add_argument(
        "--requests", type=int, default=None,
        help="end the run once this many forecast requests are answered (any status); --run-time "
        "then only caps it (default 10 min)",
    )
    p.add_argument(
        "--no-backoff", action="store_true",
        help="users ignore Retry-After and retry after their usual pause (a careless client, "
        "for stress tests); default: a shed user waits Retry-After",
    )
    add_key_argument(p)


def add_key_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key", default=None,
                   help="API key sent as X-API-Key (services with keys on); env KRONOS_API_KEY")


def check_key(host: str, api_key: str | None, command: str) -> str | None:
    """None when the service takes ``api_key`` (or has keys off); else the message to stop on:
    one request before any load, so that a missing or wrong key ends the run at once."""
    import urllib.error
    import urllib.request

    headers = {"X-API-Key": api_key} if api_key else {}
    request = urllib.request.Request(host.rstrip("/") + "/v1/symbols?limit=1", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code not in (401, 403):
            return None  # not a key problem: the load test reports what follows
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except ValueError:
            detail = ""
        given = "no API key was given" if not api_key else "the API key given was refused"
        return (
            f"{command}: the service answered {exc.code} ({detail}): {given}; pass --api-key or "
            "set KRONOS_API_KEY to a key with access to forecast and symbols"
        )


def start_service(replicas: int | None, extra_args: list[str] | tuple = (),
                  timeout: float = 180.0) -> tuple[str, subprocess.Popen]:
    """``kronos serve`` in its own process (Ray and locust's gevent do not share one), on a free
    loopback port; ``replicas`` None: the service's default. Returns its URL and process once
    ``/readyz`` answers 200; stops it again when it does not within ``timeout`` seconds."""
    port = _free_port()
    host = f"http://127.0.0.1:{port}"
    replica_args = [] if replicas is None else ["--replicas", str(replicas)]
    server = subprocess.Popen(
        [
            sys.executable, "-m", "kronos_core.cli", "serve", "--host", "127.0.0.1", "--port",
            str(port), *replica_args, *extra_args,
        ],
    )
    try:
        _wait_ready(host, server, timeout)
    except BaseException:
        stop_service(server)
        raise
    return host, server


def stop_service(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGINT)  # kronos serve shuts Serve and Ray down cleanly
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()


def _answered(env) -> int:
    """Forecast requests answered so far (any status)."""
    return sum(
        e.num_requests
        for (name, _m), e in env.stats.entries.items()
        if name.startswith("/v1/forecast")
    )


def _drive(host: str, users: int, spawn_rate: float, run_s: float, stop_timeout: float = 0,
           requests: int | None = None) -> dict:
    """Run locust headless for ``run_s`` seconds, or until ``requests`` forecast requests are
    answered (then up to ``stop_timeout`` more while the users finish their requests in
    flight); the summary of what happened."""
    import gevent
    from locust.env import Environment
    from locust.stats import stats_history, stats_printer

    from loadtests import locustfile

    env = Environment(user_classes=[locustfile.PortfolioUser], host=host, events=locustfile.events,
                      stop_timeout=stop_timeout or None)
    runner = env.create_local_runner()
    env.events.test_start.fire(environment=env)
    gevent.spawn(stats_printer(env.stats))
    gevent.spawn(stats_history, runner)
    t0 = time.time()
    runner.start(users, spawn_rate=spawn_rate)
    end = time.monotonic() + run_s
    while time.monotonic() < end and not locustfile.auth_failure:
        if requests is not None and _answered(env) >= requests:
            break
        gevent.sleep(min(0.2, max(0.0, end - time.monotonic())))
    runner.quit()
    runner.greenlet.join(timeout=30 + stop_timeout)
    elapsed = time.time() - t0
    total = env.stats.total
    rows = []
    for (name, method), e in sorted(env.stats.entries.items()):
        rows.append(
            {
                "name": name, "method": method, "requests": e.num_requests,
                "failures": e.num_failures, "rps": round(e.num_requests / elapsed, 3),
                "p50_ms": e.get_response_time_percentile(0.5),
                "p95_ms": e.get_response_time_percentile(0.95),
                "p99_ms": e.get_response_time_percentile(0.99), "max_ms": e.max_response_time,
            }
        )
    return {
        "host": host, "users": users, "run_time_s": round(elapsed, 1),
        "portfolio_symbols": locustfile.PORTFOLIO, "horizon": locustfile.HORIZON,
        "requests": total.num_requests,
        "ok_200": locustfile.outcomes["ok"],
        "shed_503_429": locustfile.outcomes["shed"],  # load shed with Retry-After: not a success
        # everything else that went wrong
        "failures": total.num_failures - locustfile.outcomes["shed"],
        "rps": round(total.num_requests / elapsed, 3),
        # answered only
        "series_per_s": round(locustfile.outcomes["ok"] * locustfile.PORTFOLIO / elapsed, 1),
        "p50_ms": total.get_response_time_percentile(0.5),
        "p95_ms": total.get_response_time_percentile(0.95),
        "p99_ms": total.get_response_time_percentile(0.99), "max_ms": total.max_response_time,
        # answered requests only (sheds are fast and would flatter the percentiles)
        "answered_p99_ms": _percentile(locustfile.answered_ms, 99),
        "answered_per_s": round(locustfile.outcomes["ok"] / elapsed, 3),
        "backoff": locustfile.backoff(),
        "endpoints": rows,
        "auth_failure": dict(locustfile.auth_failure) or None,
    }


def _percentile(values: list[float], q: float) -> float | None:
    """The ``q``th percentile of ``values`` (None when empty)."""
    if not values:
        return None
    import numpy as np

    return round(float(np.percentile(np.asarray(values), q)), 1)


def _write(summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    md = [
        f"# Load test: {summary['users']} users, {summary['run_time_s']} s against "
        f"{summary['host']}",
        "",
        f"requests {summary['requests']}: {summary['ok_200']} answered 200, "
        f"{summary['shed_503_429']} shed (503/429), {summary['failures']} failed; {summary['rps']} "
        f"req/s, ~{summary['series_per_s']} series/s",
        "",
    ]
    md += markdown_table(
        ["endpoint", "requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
            [
                f"{r['method']} {r['name']}", r["requests"], r["failures"], r["rps"], r["p50_ms"],
                r["p95_ms"], r["p99_ms"], round(r["max_ms"] or 0),
            ]
            for r in summary["endpoints"]
        ],
    )
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'summary.json'} and {out / 'summary.md'}")


def requires(args: argparse.Namespace) -> list:
    """locust (the ``load`` extra), and the ``serve`` extra unless ``--host`` names a running
    service."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(["locust"]) + ([] if args.host else needs(SERVE_MODULES, "the service it starts"))


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("GEVENT_SUPPORT", "True")
    if args.api_key:
        os.environ["KRONOS_API_KEY"] = args.api_key  # the locust users read it
    if args.no_backoff:
        from loadtests.locustfile import NO_BACKOFF_VARIABLE

        os.environ[NO_BACKOFF_VARIABLE] = "1"
    run_s = (
        600.0
        if args.requests and args.run_time == RUN_TIME_DEFAULT
        else min(_seconds(args.run_time), 600.0)
    )
    if args.host and urlparse(args.host).hostname not in LOOPBACK:
        print(
            f"kronos loadtest: --host must be a loopback address, got {args.host}", file=sys.stderr
        )
        return 2
    server: subprocess.Popen | None = None
    host = args.host
    if not host:
        host, server = start_service(args.replicas)
    try:
        refused = check_key(host, os.environ.get("KRONOS_API_KEY"), "kronos loadtest")
        if refused:
            print(refused, file=sys.stderr)
            return 2
        summary = _drive(host, args.users, args.spawn_rate, run_s, args.stop_timeout, args.requests)
    finally:
        if server is not None:
            stop_service(server)
    _write(summary, Path(args.out))
    if summary["auth_failure"]:
        failure = summary["auth_failure"]
        print(
            f"kronos loadtest: stopped: the service answered {failure['status']} "
            f"({failure['detail']}); pass --api-key or set KRONOS_API_KEY", file=sys.stderr,
        )
        return 2
    if summary["ok_200"] < args.min_ok:
        print(f"only {summary['ok_200']} forecast requests answered 200 (--min-ok {args.min_ok})")
        return 1
    return 1 if summary["failures"] else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtests.run``: ``kronos loadtest``, through the same command line (flags, help,
    logging)."""
    from kronos_core.cli import main as kronos_main

    return kronos_main(["loadtest", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
