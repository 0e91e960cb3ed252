"""The request's edges (issue 28): one request id per request, the access log line (text and
JSON), CORS preflights answered per the setting before the key check, key scopes for
/v1/accuracy and the docs, /v1/accuracy never a 500, start-up checks (ledger folder, public
bind), and a bad setting named by its variable. Real ASGI apps through Starlette's test
client; no Ray."""

from __future__ import annotations

import asyncio
import json
import logging

import orjson
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from service.auth import ApiKeyMiddleware, KeyRing, hash_key, parse_keys
from service.common.settings import Settings
from service.cors import CorsMiddleware, parse_origins
from service.request_log import (
    RequestIdMiddleware,
    configure_logging,
    current_request_id,
    log_access,
)


def _echo_app(**middlewares) -> Starlette:
    async def echo(request):
        return JSONResponse(
            {"request_id": current_request_id(), "scope_id": request.scope["state"]["request_id"]}
        )

    app = Starlette(
        routes=[
            Route("/v1/forecast", echo, methods=["GET", "POST"]), Route("/v1/accuracy", echo),
            Route("/docs", echo), Route("/openapi.json", echo),
        ]
    )
    return app


def test_one_id_per_request_kept_from_the_caller_or_made():
    app = _echo_app()
    app.add_middleware(RequestIdMiddleware)
    with TestClient(app) as client:
        mine = client.get("/v1/forecast", headers={"X-Request-Id": "caller-42"})
        assert mine.json() == {"request_id": "caller-42", "scope_id": "caller-42"}
        assert "x-request-id" not in mine.headers  # behind Serve its proxy sends the caller's back
        made = client.get("/v1/forecast")
        rid = made.headers["x-request-id"]
        assert made.json() == {"request_id": rid, "scope_id": rid} and len(rid) == 36
        assert client.get("/v1/forecast").headers["x-request-id"] != rid
    assert current_request_id() is None  # reset after the request


def test_access_lines_carry_the_request_in_json_and_text(tmp_path):
    settings = Settings(log_format="json", log_dir=str(tmp_path))
    handler = configure_logging(settings, "test")
    try:
        key = parse_keys(f"{hash_key('k')} alice * -", "test")[0]
        scope = {
            "state": {"request_id": "r-1", "api_key": key, "symbols": 3, "timing": {"read_ms": 1.5}}
        }
        log_access("POST", "/v1/forecast", 200, 0.25, scope)
        logging.getLogger("service.gateway.dispatch").warning("shard r-1/0: replica gone")
        handler.flush()
        (path,) = list(tmp_path.iterdir())
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        access = lines[0]
        assert access["logger"] == "service.access" and access["request_id"] == "r-1"
        assert (
            access["status"] == 200
            and access["method"] == "POST"
            and access["route"] == "/v1/forecast"
        )
        assert (access["key"], access["symbols"], access["duration_ms"], access["timing"]) == (
            "alice", 3, 250.0, {"read_ms": 1.5},
        )
        # the key's name only
        assert "k" not in {access["key"]} and hash_key("k") not in path.read_text()
        # outside a request: none
        assert lines[1]["level"] == "warning" and "request_id" not in lines[1]
        text = Settings(log_format="text", log_dir=str(tmp_path / "text"))
        handler = configure_logging(text, "test")
        log_access("GET", "/v1/models", 403, 0.001, {"state": {"request_id": "r-2"}})
        handler.flush()
        (text_file,) = list((tmp_path / "text").iterdir())
        assert "[r-2] GET /v1/models 403" in text_file.read_text()
    finally:
        logging.getLogger("service").removeHandler(handler)
        logging.getLogger("service").propagate = True


def _keyed_app(cors: str | None) -> Starlette:
    app = _echo_app()
    ring = KeyRing(parse_keys(f"{hash_key('fc')} fc forecast -; {hash_key('all')} ops * -", "test"))
    app.add_middleware(ApiKeyMiddleware, get_ring=lambda: ring)
    origins = parse_origins(cors)
    app.add_middleware(CorsMiddleware, get_origins=lambda: origins)
    app.add_middleware(RequestIdMiddleware)
    return app


PREFLIGHT = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "x-api-key,content-type"}


def test_a_preflight_is_answered_per_the_setting_and_never_401():
    with TestClient(_keyed_app(None)) as off:
        r = off.options("/v1/forecast", headers=PREFLIGHT)
        assert r.status_code == 204 and not any(
            h.startswith("access-control-allow") for h in r.headers
        )
        plain = off.get(
            "/v1/forecast", headers={"Origin": "https://app.example", "X-API-Key": "fc"}
        )
        assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
    with TestClient(_keyed_app("https://app.example, https://other.example/")) as on:
        r = on.options("/v1/forecast", headers=PREFLIGHT)
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "https://app.example"
        assert "X-API-Key" in r.headers["access-control-allow-headers"]
        elsewhere = on.options("/v1/forecast", headers={**PREFLIGHT, "Origin": "https://evil.example"})
        assert (
            elsewhere.status_code == 204 and "access-control-allow-origin" not in elsewhere.headers
        )
        real = on.get("/v1/forecast", headers={"Origin": "https://app.example", "X-API-Key": "fc"})
        assert real.headers["access-control-allow-origin"] == "https://app.example"
        assert "X-Request-Id" in real.headers["access-control-expose-headers"]
        assert on.get("/v1/forecast", headers={"Origin": "https://app.example"}).status_code == 401
    with TestClient(_keyed_app("*")) as anyone:
        r = anyone.options("/v1/forecast", headers={**PREFLIGHT, "Origin": "https://x.example"})
        assert r.headers["access-control-allow-origin"] == "https://x.example"


def test_accuracy_and_the_docs_are_scopes_of_their_own():
    with TestClient(_keyed_app(None)) as client:
        for path in ("/v1/accuracy", "/docs", "/openapi.json"):
            r = client.get(path, headers={"X-API-Key": "fc"})
            assert r.status_code == 403 and r.json()["code"] == "forbidden", path
            assert client.get(path, headers={"X-API-Key": "all"}).status_code == 200, path
        assert client.get("/v1/forecast", headers={"X-API-Key": "fc"}).status_code == 200


def test_accuracy_is_a_coded_error_never_a_500():
    pytest.importorskip("ray.serve")
    from test_app import FakeHandle, _ingress

    from service.common.errors import LedgerOff, LedgerUnavailable, ServiceError
    from service.responses import error_response

    ing = _ingress(FakeHandle(lambda shard: None))
    ing.live = None  # the ledger is off

    def answer(**kw):
        try:
            return asyncio.run(ing.accuracy(**kw))
        except ServiceError as exc:
            return error_response(exc, ing.metrics), exc

    resp, exc = answer()
    assert isinstance(exc, LedgerOff) and resp.status_code == 404
    assert orjson.loads(resp.body)["code"] == "ledger_off"

    class Broken:
        def answer(self, *args):
            raise PermissionError(13, "Permission denied", "/srv/secret/ledger/x.parquet")

    ing.live = Broken()
    resp, exc = answer()
    body = orjson.loads(resp.body)
    assert (
        isinstance(exc, LedgerUnavailable)
        and resp.status_code == 503
        and body["code"] == "ledger_unavailable"
    )
    # no server path
    assert "PermissionError" in body["detail"] and "/srv/secret" not in body["detail"]


def test_an_unwritable_ledger_folder_is_refused_at_start_and_off_is_said_once(tmp_path, caplog):
    from service.preflight import StartupError, check_ledger, check_startup, ledger_problem

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = Settings(ledger_dir=str(blocker / "ledger"))
    problem = ledger_problem(bad)
    assert problem and str(blocker / "ledger") in problem and "KRONOS_LEDGER_DIR=off" in problem
    with pytest.raises(StartupError, match="not writable"):
        check_ledger(bad)  # what each gateway runs as it starts (kronos serve: before Ray)
    good = Settings(ledger_dir=str(tmp_path / "new" / "ledger"))
    # probe removed
    assert ledger_problem(good) is None and list((tmp_path / "new" / "ledger").iterdir()) == []
    with caplog.at_level(logging.WARNING, logger="service.preflight"):
        check_startup(Settings(ledger_dir="off"))
        check_startup(Settings(ledger_dir="off"), announce=False)  # kronos serve said it itself
    assert sum("forecast ledger is off" in r.getMessage() for r in caplog.records) == 1


def test_build_app_refuses_a_public_bind_without_keys_unless_allowed(monkeypatch):
    pytest.importorskip("ray.serve")
    from service import app
    from service.preflight import StartupError

    monkeypatch.delenv("KRONOS_API_KEYS", raising=False)
    with pytest.raises(StartupError, match="KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS"):
        app.build_app({"host": "0.0.0.0", "device": "cpu"})  # the Serve-config path (KubeRay)
    monkeypatch.setattr(app, "ship_weights", lambda settings: None)  # past the check: no Ray here
    monkeypatch.setattr(app, "_cluster_gpus", lambda: 0)
    assert (
        app.build_app({"host": "0.0.0.0", "device": "cpu", "allow_public_without_keys": True})
        is not None
    )
    assert app.build_app({"host": "0.0.0.0", "device": "cpu",
                          "api_keys": f"{hash_key('k')} ops * -"}) is not None


def test_a_bad_setting_is_named_by_its_variable_without_a_pydantic_url(monkeypatch):
    pytest.importorskip("ray.serve")
    from service import app
    from service.preflight import StartupError

    monkeypatch.setenv("KRONOS_SHUTDOWN_GRACE_S", "soon")
    with pytest.raises(StartupError) as caught:
        app.build_app({"device": "cpu"})
    message = str(caught.value)
    assert (
        "KRONOS_SHUTDOWN_GRACE_S" in message
        and "'soon'" in message
        and "errors.pydantic.dev" not in message
    )


def test_serve_names_the_variable_and_the_flag(capsys, monkeypatch):
    import argparse

    from service.cli import add_arguments, run

    monkeypatch.setenv("KRONOS_SHUTDOWN_GRACE_S", "soon")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--port", "99999"])) == 2
    err = capsys.readouterr().err
    assert "KRONOS_SHUTDOWN_GRACE_S (shutdown_grace_s) = 'soon'" in err
    assert "KRONOS_PORT (port, --port) = 99999" in err and "pydantic.dev" not in err


def test_a_streamed_body_past_the_limit_says_so():
    from service.limits import too_large_message

    assert too_large_message(None, 1024) .startswith("request body passed the limit of 1024 bytes")
    assert too_large_message(2048, 1024).startswith(
        "request body is 2048 bytes, above the limit of 1024"
    )


def test_metrics_on_their_own_port_one_holder_at_a_time():
    import socket
    import urllib.error
    import urllib.request

    from service.metrics_port import MetricsPort

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    def scrape() -> bytes:
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read()
            except urllib.error.URLError:
                asyncio.run(asyncio.sleep(0.05))
        raise AssertionError("nothing serves the metrics port")

    first = MetricsPort("127.0.0.1", port, lambda: b"kronos_up 1\n", "text/plain").start()
    assert scrape() == b"kronos_up 1\n"
    second = MetricsPort("127.0.0.1", port, lambda: b"other 1\n", "text/plain").start()
    try:
        assert scrape() == b"kronos_up 1\n"  # the first holds the port; the second waits its turn
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/forecast", timeout=5)
        assert missing.value.code == 404
    finally:
        first.stop()
        second.stop()


@pytest.mark.parametrize("given", ["x" * 129, "x" * 5000, "a b", 'q"uote', "new\\nline", "é"])
def test_a_long_or_unsafe_caller_id_is_replaced_by_a_new_one(given):
    """Issue 45: 5,000 characters of ``X-Request-Id`` were echoed and logged. An id of more
    than 128 characters, or with characters outside letters, digits and ``._:-``, is replaced
    by a new UUID, at the gateway and in Serve's proxy (``ProxyRequestIdGuard``)."""
    from service.request_log import MAX_REQUEST_ID, ProxyRequestIdGuard, safe_request_id

    assert MAX_REQUEST_ID == 128 and not safe_request_id(given)
    assert safe_request_id("x" * 128) and safe_request_id("a.b_c:d-4")
    app = _echo_app()
    app.add_middleware(RequestIdMiddleware)
    raw = given.encode("utf-8")
    with TestClient(app) as client:
        r = client.get("/v1/forecast", headers=[(b"X-Request-Id", raw)])
        rid = r.headers.get_list("x-request-id")
        assert len(rid) == 1 and len(rid[0]) == 36 and rid[0] != given
        assert r.json() == {"request_id": rid[0], "scope_id": rid[0]}

    seen: list[list] = []

    async def inner(scope, receive, send):
        seen.append(list(scope["headers"]))

    guard = ProxyRequestIdGuard(inner)
    for header, kept in ((raw, False), (b"ok-1", True)):
        scope = {"type": "http", "headers": [(b"x-request-id", header), (b"host", b"h")]}
        asyncio.run(guard(scope, None, None))
        assert ((b"x-request-id", header) in seen[-1]) is kept and (b"host", b"h") in seen[-1]


def test_a_metrics_port_held_by_another_program_is_logged_once_and_flagged(caplog):
    """Issue 45: ``KRONOS_METRICS_PORT`` held by something that is not a gateway (here a bare
    socket that never answers HTTP) was taken for another gateway's turn and retried in
    silence. It is an error, logged once, and ``conflict`` lets the API port serve
    ``/metrics`` meanwhile; once the port is free the gateway takes it."""
    import socket
    import urllib.request

    from service import metrics_port as M

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    retry = M.RETRY_S
    M.RETRY_S = 0.2
    held = M.MetricsPort("127.0.0.1", port, lambda: b"kronos_up 1\n", "text/plain")
    try:
        with caplog.at_level(logging.ERROR, logger=M.__name__):
            held.start()
            for _ in range(200):
                if held.conflict:
                    break
                asyncio.run(asyncio.sleep(0.05))
            assert held.conflict and "does not serve Kronos metrics" in held.conflict
            asyncio.run(asyncio.sleep(M.PROBE_TIMEOUT_S * 2 + 0.5))  # a few more tries
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], errors
        assert "served on the API port" in errors[0]
        squatter.close()  # the program goes: the gateway takes the port
        for _ in range(200):
            if held.conflict is None and held.server is not None:
                break
            asyncio.run(asyncio.sleep(0.05))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.read() == b"kronos_up 1\n"
    finally:
        M.RETRY_S = retry
        squatter.close()
        held.stop()


def test_refused_keys_are_logged_by_name_or_hash_prefix_with_the_route(caplog):
    """Issue 45: a 403 line named neither the key nor the route. A 401 names the presented
    key by its hash prefix (``sha256:<12 hex>``), a 403 by its name, both with the route;
    neither writes the key."""
    from service.auth import key_id

    ring = KeyRing(parse_keys(f"{hash_key('secret-k')} alice forecast -", "test"))
    app = _echo_app()
    app.add_middleware(ApiKeyMiddleware, get_ring=lambda: ring)
    with caplog.at_level(logging.WARNING, logger="service.auth"), TestClient(app) as client:
        assert client.get("/v1/accuracy", headers={"X-API-Key": "secret-k"}).status_code == 403
        assert client.get("/v1/forecast", headers={"X-API-Key": "wrong-k"}).status_code == 401
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("403: key alice refused for GET /v1/accuracy")
    assert "'accuracy'" in lines[0]
    assert lines[1].startswith(f"401: key {key_id('wrong-k')} refused for GET /v1/forecast")
    assert key_id("wrong-k") == "sha256:" + hash_key("wrong-k")[:12] and key_id(None) == "-"
    assert "secret-k" not in caplog.text and "wrong-k" not in caplog.text
