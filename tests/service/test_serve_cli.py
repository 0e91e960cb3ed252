"""``kronos serve`` start-up checks that need no Ray: a busy port and misspelt KRONOS_*
variables."""

from __future__ import annotations

import argparse
import os
import socket

import pytest

from service import cli


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture(params=[False, True], ids=["plain", "reuseport"])
def listening(request):
    """A socket listening on a free loopback port (what a first service looks like), plain or,
    like Ray Serve's proxy, with SO_REUSEPORT (which a second proxy could share)."""
    with socket.socket() as s:
        if request.param:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if ``kronos serve`` gets as far as loading the model or starting Ray."""

    def refuse(*_a, **_k):
        raise AssertionError("kronos serve went on past a busy port")

    monkeypatch.setattr(cli, "check_model", refuse)
    monkeypatch.setattr(cli, "start", refuse)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("KRONOS_RAY_ADDRESS", raising=False)


def test_busy_port_stops_serve_before_ray_naming_the_port_and_its_holder(listening, no_ray, capsys):
    assert cli.run(_args("--port", str(listening))) == 2
    err = capsys.readouterr().err
    assert f"port {listening} on 127.0.0.1 is in use" in err
    assert f"pid {os.getpid()}" in err  # the holder: this test process
    assert "--port" in err


def test_port_holder_names_the_listener_and_is_none_for_a_free_port(listening):
    assert f"pid {os.getpid()} (" in cli.port_holder("127.0.0.1", listening)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert cli.port_holder("127.0.0.1", free) is None


def test_busy_port_without_a_visible_holder_is_just_in_use(listening, no_ray, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_listener", lambda port: None)  # psutil sees nothing (no permission)
    assert cli.run(_args("--port", str(listening))) == 2
    assert f"port {listening} on 127.0.0.1 is in use;" in capsys.readouterr().err


def test_misspelt_kronos_variables_warn_with_the_nearest_setting():
    from service.common.settings import unknown_kronos_variables

    env = {
        "KRONOS_DEVCIE": "cuda", "KRONOS_MAX_INFLIGHT_REQUEST": "3", "KRONOS_PORT": "9000",
        "HOME": "/root", "KRONOS_RAY_ADDRESS": "ray://h:1", "KRONOS_HOME": "/tmp/k",
        "KRONOS_LOAD_WAIT_S": "0,1", "kronos_device": "cpu", "KRONOS_ZZZ": "1",
    }
    messages = unknown_kronos_variables(env)
    assert messages == [
        "KRONOS_DEVCIE is not a setting and is ignored (did you mean KRONOS_DEVICE?)",
        "KRONOS_MAX_INFLIGHT_REQUEST is not a setting and is ignored (did you mean "
        "KRONOS_MAX_INFLIGHT_REQUESTS?)",
        "KRONOS_ZZZ is not a setting and is ignored (the settings are listed in docs/service.md)",
    ]
    assert unknown_kronos_variables({}) == []


def test_kronos_serve_warns_about_a_misspelt_variable_at_start(monkeypatch, capsys):
    monkeypatch.setenv("KRONOS_DEVCIE", "cuda")
    monkeypatch.setattr(cli, "port_holder", lambda host, port: None)
    monkeypatch.setattr(cli, "check_model", lambda settings: "stopped by the test")
    assert cli.run(_args()) == 2
    err = capsys.readouterr().err
    assert (
        "WARNING: KRONOS_DEVCIE is not a setting and is ignored (did you mean KRONOS_DEVICE?)"
        in err
    )


def test_every_kronos_variable_the_code_reads_is_a_setting_or_allowed():
    """A KRONOS_* variable read with os.environ / getenv outside the settings must be in the
    allow-list, or ``kronos serve`` would warn that it is misspelt."""
    import re
    from pathlib import Path

    from service.common.settings import OTHER_KRONOS_VARIABLES, setting_variables

    root = Path(__file__).resolve().parents[2]
    read = re.compile(
        r"""(?:environ\.get\(|environ\[|getenv\(|[,(]\s*)["']?(KRONOS_[A-Z0-9_]+)["']?\s*[,)\]=]"""
        r"""|^[A-Z_]+ = ["'](KRONOS_[A-Z0-9_]+)["']$""",  # a module constant naming the variable
        re.MULTILINE,
    )
    found = {}
    for folder in ("kronos_core", "service", "loadtests", "scripts"):
        for path in (root / folder).rglob("*.py"):
            for names in read.findall(path.read_text()):
                for name in filter(None, names):
                    found.setdefault(name, str(path.relative_to(root)))
    # the scan sees the known readers, through a module constant too (host_memory.ENV)
    assert {"KRONOS_HOME", "KRONOS_LOAD_WAIT_S", "KRONOS_MALLOC_TUNING"} <= set(found)
    stray = {
        n: p for n, p in found.items() if n not in setting_variables() | set(OTHER_KRONOS_VARIABLES)
    }
    assert stray == {}


def test_a_serve_config_build_warns_about_a_misspelt_variable_too(monkeypatch, caplog):
    pytest.importorskip("ray.serve")
    import logging

    from service import app

    monkeypatch.setenv("KRONOS_DEVCIE", "cuda")
    monkeypatch.setattr(app, "_cluster_gpus", lambda: 0)
    with caplog.at_level(logging.WARNING, logger="service.app"):
        app.build_app({"device": "cpu"})  # what `serve run deploy/serve_config.yaml` calls
    assert (
        "KRONOS_DEVCIE is not a setting and is ignored (did you mean KRONOS_DEVICE?)" in caplog.text
    )


def test_the_exit_watchdog_ends_the_process_at_its_deadline_only():
    """Issue 45: with a 15 s grace the process exited at 25.0 s, Ray's teardown running on. The
    watchdog ends it at grace + EXIT_MARGIN_S whatever is still running (here a fake exit)."""
    import threading
    import time

    from service.cli import exit_watchdog

    fired: list[float] = []
    done = threading.Event()

    def fake_exit() -> None:
        fired.append(time.monotonic())
        done.set()

    start = time.monotonic()
    thread = exit_watchdog(start + 0.3, fake_exit)
    assert thread.daemon  # never holds a clean exit back
    assert done.wait(5) and len(fired) == 1
    assert fired[0] - start >= 0.3


def test_the_engines_own_switches_are_not_called_misspelt():
    """The engine's switches (the allocator, the compiled top-p draw and causal attention) are
    read by the engine, not the settings: ``kronos serve`` takes them without a warning."""
    from service.common.settings import unknown_kronos_variables

    switches = ("KRONOS_MALLOC_TUNING", "KRONOS_TOP_P_ROWS", "KRONOS_NATIVE_ATTENTION",
                "KRONOS_NATIVE_CACHE")
    assert unknown_kronos_variables(dict.fromkeys(switches, "0")) == []
