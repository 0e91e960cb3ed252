"""``kronos bench overload``: goodput under overload. One service with one predictor replica,
driven first by a few users (the baseline), then by ten times as many careless users that
ignore ``Retry-After`` (``--no-backoff`` behaviour), in one go; prints both runs and their
ratios (issue 45).

    kronos bench overload                           # starts its own service: 4 then 40 users
    kronos bench overload --run-time 90s --json overload.json

Goals, checked against the baseline of the same run (a loaded machine moves both): answered
requests per second at the high load at least ``--min-goodput`` (0.8) of the baseline's, and
the answered requests' p99 latency at most ``--max-p99-ratio`` (3) times the baseline's. Exit
0: both met; 1: a goal missed (the figures say which); 2: the service could not be driven.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from loadtests.run import RUN_TIME_DEFAULT, _drive, _seconds, start_service, stop_service


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None,
                   help="a running service with one replica (loopback); default: start one")
    p.add_argument("--users", type=int, default=4, help="the baseline's users (default 4)")
    p.add_argument("--factor", type=int, default=10,
                   help="the overload is this many times the baseline's users (default 10)")
    p.add_argument("--run-time", default="60s", help=f"of each run (default 60s; loadtest: "
                   f"{RUN_TIME_DEFAULT})")
    p.add_argument("--min-goodput", type=float, default=0.8,
                   help="answered/s under overload over the baseline's, at least (default 0.8)")
    p.add_argument("--max-p99-ratio", type=float, default=3.0,
                   help="answered p99 under overload over the baseline's, at most (default 3)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the kronos serve it starts (repeatable), e.g. "
                        "--serve-arg=--max-inflight --serve-arg=4")
    p.add_argument("--json", type=Path, default=None, help="write both runs and the verdict here")


def requires(args: argparse.Namespace) -> list:
    from loadtests.run import requires as loadtest_requires

    return loadtest_requires(args)


def _run(host: str, users: int, run_s: float, backoff: bool) -> dict:
    from loadtests.locustfile import NO_BACKOFF_VARIABLE

    if backoff:
        os.environ.pop(NO_BACKOFF_VARIABLE, None)
    else:
        os.environ[NO_BACKOFF_VARIABLE] = "1"
    summary = _drive(host, users, max(1.0, users / 2), run_s)
    summary.pop("endpoints", None)
    return summary


def verdict(base: dict, over: dict, min_goodput: float, max_p99_ratio: float) -> dict:
    """The two ratios and whether each goal is met (a run that answered nothing misses both)."""
    goodput = (over["answered_per_s"] / base["answered_per_s"]) if base["answered_per_s"] else 0.0
    p99 = (
        over["answered_p99_ms"] / base["answered_p99_ms"]
        if base["answered_p99_ms"] and over["answered_p99_ms"] is not None else float("inf")
    )
    return {
        "goodput_ratio": round(goodput, 3), "p99_ratio": round(p99, 3),
        "goodput_ok": goodput >= min_goodput, "p99_ok": p99 <= max_p99_ratio,
    }


def _line(name: str, s: dict) -> str:
    return (
        f"{name:>9}: {s['users']:3d} users, backoff {'on ' if s['backoff'] else 'off'} | "
        f"{s['ok_200']:5d} answered in {s['run_time_s']:.0f} s = {s['answered_per_s']:.2f}/s, "
        f"answered p99 {s['answered_p99_ms']} ms | {s['shed_503_429']} shed, "
        f"{s['failures']} failed"
    )


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("GEVENT_SUPPORT", "True")
    run_s = min(_seconds(args.run_time), 600.0)
    server = None
    host = args.host
    if not host:
        host, server = start_service(1, args.serve_arg, timeout=900.0)
    try:
        base = _run(host, args.users, run_s, backoff=True)
        over = _run(host, args.users * args.factor, run_s, backoff=False)
    finally:
        if server is not None:
            stop_service(server)
    if not base["ok_200"]:
        print("kronos bench overload: the baseline answered nothing", file=sys.stderr)
        return 2
    v = verdict(base, over, args.min_goodput, args.max_p99_ratio)
    print(_line("baseline", base))
    print(_line("overload", over))
    print(
        f"goodput ratio {v['goodput_ratio']:.2f} (goal >= {args.min_goodput}: "
        f"{'met' if v['goodput_ok'] else 'MISSED'}), answered p99 ratio {v['p99_ratio']:.2f} "
        f"(goal <= {args.max_p99_ratio}: {'met' if v['p99_ok'] else 'MISSED'})"
    )
    if args.json:
        args.json.write_text(json.dumps({"baseline": base, "overload": over, **v}, indent=2))
    return 0 if v["goodput_ok"] and v["p99_ok"] else 1
