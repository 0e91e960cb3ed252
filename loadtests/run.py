"""Headless load test against a local Kronos service; writes JSON and Markdown summaries.

    python -m loadtests.run                                   # starts the embedded service itself
    python -m loadtests.run --host http://127.0.0.1:8000 --users 16 --run-time 60s

Only loopback targets are allowed. The run time is bounded (default 30 s, at most 10 min).
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

log = logging.getLogger("loadtests.run")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=None, help="running service (loopback only); default: start one")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--spawn-rate", type=float, default=4)
    p.add_argument("--run-time", default="30s")
    p.add_argument("--replicas", type=int, default=1, help="when starting the service")
    p.add_argument("--out", default="loadtest-results", help="folder for summary.json / summary.md")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_s = min(_seconds(args.run_time), 600.0)

    server: subprocess.Popen | None = None
    host = args.host
    if host:
        if urlparse(host).hostname not in LOOPBACK:
            p.error(f"--host must be a loopback address, got {host}")
    else:
        # the service runs in its own process: Ray and locust's gevent do not share one
        port = _free_port()
        host = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "-m", "kronos_core.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--replicas", str(args.replicas)],
        )
        _wait_ready(host, server)

    import gevent
    from locust.env import Environment
    from locust.stats import stats_history, stats_printer

    from loadtests import locustfile

    try:
        env = Environment(user_classes=[locustfile.PortfolioUser], host=host, events=locustfile.events)
        runner = env.create_local_runner()
        env.events.test_start.fire(environment=env)
        gevent.spawn(stats_printer(env.stats))
        gevent.spawn(stats_history, runner)
        t0 = time.time()
        runner.start(args.users, spawn_rate=args.spawn_rate)
        gevent.sleep(run_s)
        runner.quit()
        runner.greenlet.join(timeout=30)
        elapsed = time.time() - t0
        total = env.stats.total
        rows = []
        for (name, method), e in sorted(env.stats.entries.items()):
            rows.append({
                "name": name, "method": method, "requests": e.num_requests, "failures": e.num_failures,
                "rps": round(e.num_requests / elapsed, 3),
                "p50_ms": e.get_response_time_percentile(0.5), "p95_ms": e.get_response_time_percentile(0.95),
                "p99_ms": e.get_response_time_percentile(0.99), "max_ms": e.max_response_time,
            })
        summary = {
            "host": host, "users": args.users, "run_time_s": round(elapsed, 1),
            "portfolio_symbols": locustfile.PORTFOLIO, "horizon": locustfile.HORIZON,
            "requests": total.num_requests, "failures": total.num_failures,
            "backpressure_503_429": locustfile.backpressure["count"],
            "rps": round(total.num_requests / elapsed, 3),
            "series_per_s": round(
                sum(r["requests"] for r in rows if r["name"].startswith("/v1/forecast")) * locustfile.PORTFOLIO / elapsed, 1
            ),
            "p50_ms": total.get_response_time_percentile(0.5), "p95_ms": total.get_response_time_percentile(0.95),
            "endpoints": rows,
        }
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)  # kronos serve shuts Serve and Ray down cleanly
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    md = [f"# Load test: {summary['users']} users, {summary['run_time_s']} s against {host}", "",
          f"requests {summary['requests']}, failures {summary['failures']}, back-pressure (503/429) "
          f"{summary['backpressure_503_429']}, {summary['rps']} req/s, ~{summary['series_per_s']} series/s", "",
          "| endpoint | requests | failures | req/s | p50 ms | p95 ms | p99 ms | max ms |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['method']} {r['name']} | {r['requests']} | {r['failures']} | {r['rps']} | {r['p50_ms']} | "
           f"{r['p95_ms']} | {r['p99_ms']} | {round(r['max_ms'] or 0)} |" for r in rows]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'summary.json'} and {out / 'summary.md'}")
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    os.environ.setdefault("GEVENT_SUPPORT", "True")
    sys.exit(main())
