"""The overload benchmark's verdict and the locust users' backoff (issue 45): users honour
Retry-After by default, ``KRONOS_LOAD_NO_BACKOFF=1`` keeps the careless client, and the
benchmark fails when a goodput or latency goal is missed."""

from __future__ import annotations

import pytest

from loadtests.bench_overload import verdict


def _run(answered_per_s: float, p99: float | None) -> dict:
    return {"answered_per_s": answered_per_s, "answered_p99_ms": p99}


def test_the_verdict_checks_both_goals_against_the_baseline():
    ok = verdict(_run(2.8, 1300), _run(2.5, 3600), 0.8, 3.0)
    assert ok == {"goodput_ratio": 0.893, "p99_ratio": 2.769, "goodput_ok": True, "p99_ok": True}
    issue_45 = verdict(_run(2.8, 1300), _run(1.2, 15000), 0.8, 3.0)  # the figures of the issue
    assert not issue_45["goodput_ok"] and not issue_45["p99_ok"]
    nothing = verdict(_run(2.8, 1300), _run(0.0, None), 0.8, 3.0)
    assert not nothing["goodput_ok"] and not nothing["p99_ok"]


_BACKOFF_CHECK = """
import os, time
from locust.env import Environment
from loadtests import locustfile
os.environ.pop(locustfile.NO_BACKOFF_VARIABLE, None)
env = Environment(user_classes=[locustfile.PortfolioUser], host="http://127.0.0.1:9")
locustfile.PortfolioUser.host = env.host
user = locustfile.PortfolioUser(env)
low, high = locustfile.WAIT_S
assert locustfile.backoff()
assert low <= user.wait_time() <= high, "not shed: the usual pause"
user.retry_at = time.monotonic() + 3.0  # shed with Retry-After: 3
assert 3.0 + low - 0.1 <= user.wait_time() <= 3.0 + high, user.wait_time()
os.environ[locustfile.NO_BACKOFF_VARIABLE] = "1"
assert not locustfile.backoff()
print("ok")
"""


def test_users_wait_retry_after_unless_told_not_to():
    """In a process of its own: locust monkey-patches the standard library with gevent."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _BACKOFF_CHECK], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


@pytest.mark.parametrize("flag, expected", [([], None), (["--no-backoff"], "1")])
def test_loadtest_no_backoff_flag(flag, expected, monkeypatch):
    import argparse

    from loadtests import run

    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    args = parser.parse_args(flag)
    assert args.no_backoff is bool(flag)
