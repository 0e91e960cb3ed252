"""``kronos serve`` start-up checks that need no Ray: a busy port and misspelt KRONOS_* variables."""

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
