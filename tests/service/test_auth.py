"""Optional API keys (401 without a key, 403 without access, never logged) and per-key rate
limits in series per second (429 with Retry-After)."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from service.auth import (
    ApiKeyMiddleware,
    KeyFileError,
    KeyRing,
    TokenBucket,
    hash_key,
    load_keyring,
    parse_keys,
)
from service.common.settings import Settings

ALICE, OPS = "alice-secret-key", "ops-secret-key"


def _keys_text():
    return (f"# hashed keys\n{hash_key(ALICE)} alice forecast,symbols 100\n"
            f"{hash_key(OPS)}  ops * -  # no rate limit\n")


def _client(ring: KeyRing):
    app = FastAPI()
    app.add_middleware(ApiKeyMiddleware, get_ring=lambda: ring)

    @app.post("/v1/forecast")
    async def forecast(request: Request):
        key = request.scope["state"]["api_key"]
        return {"key": key.name}

    @app.get("/v1/models")
    async def models():
        return {"models": []}

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    return TestClient(app)


def test_keys_off_by_default_let_everything_through():
    ring = load_keyring(Settings())
    assert not ring.enabled
    app = FastAPI()
    app.add_middleware(ApiKeyMiddleware, get_ring=lambda: ring)
    app.get("/v1/models")(lambda: {"models": []})
    assert TestClient(app).get("/v1/models").status_code == 200


def test_401_without_or_with_unknown_key_403_without_access(caplog):
    c = _client(KeyRing(parse_keys(_keys_text(), "test")))
    with caplog.at_level(logging.DEBUG):
        r = c.post("/v1/forecast", json={})
        assert (
            r.status_code == 401
            and r.json()["code"] == "unauthorized"
            and "Bearer" in r.headers["WWW-Authenticate"]
        )
        assert c.post("/v1/forecast", headers={"X-API-Key": "wrong"}).status_code == 401
        assert c.post("/v1/forecast", headers={"Authorization": f"Bearer {ALICE}"}).json() == {
            "key": "alice"
        }
        assert c.post("/v1/forecast", headers={"X-API-Key": OPS}).json() == {"key": "ops"}
        r = c.get("/v1/models", headers={"X-API-Key": ALICE})
        assert (
            r.status_code == 403
            and "alice" in r.json()["detail"]
            and "models" in r.json()["detail"]
        )
        assert c.get("/v1/models", headers={"X-API-Key": OPS}).status_code == 200
        assert c.get("/healthz").status_code == 200  # probes stay open
    for secret in (ALICE, OPS):
        assert secret not in caplog.text


def test_keys_from_env_and_file_together(tmp_path, monkeypatch):
    f = tmp_path / "keys.txt"
    f.write_text(f"{hash_key(OPS)} ops * -\n")
    monkeypatch.setenv("KRONOS_API_KEYS", f"{hash_key(ALICE)} alice forecast 5")
    ring = load_keyring(Settings(api_keys_file=str(f)))
    assert {k.name for k in ring.keys.values()} == {"alice", "ops"}
    assert ring.lookup(ALICE).series_per_s == 5 and ring.lookup(OPS).series_per_s is None
    assert ring.lookup(hash_key(ALICE)) is None  # the hash itself is not a key


@pytest.mark.parametrize("line, fragment", [
    ("abc alice * 5", "SHA-256"),
    (f"{hash_key('k')} alice trade 5", "unknown route"),
    (f"{hash_key('k')} alice * -3", "positive number"),
    (f"{hash_key('k')} alice *", "4 fields"),
])
def test_bad_key_lines_name_the_line_and_fix(line, fragment):
    with pytest.raises(KeyFileError, match=fragment) as info:
        parse_keys(f"\n{line}\n", "keys.txt")
    assert "keys.txt line 2" in str(info.value)


def test_token_bucket_in_series_per_second():
    b = TokenBucket(rate=100, capacity=1000, stamp=0.0)
    assert b.take(1000, now=0.0) == 0.0  # the whole burst at once
    # admitted into debt: a big portfolio is never refused forever
    assert b.take(500, now=0.0) == 0.0
    assert b.take(1, now=0.0) == pytest.approx(5.0)  # 500 series of debt at 100 series/s
    assert b.take(1, now=3.0) == pytest.approx(2.0)
    assert b.take(10, now=5.0) == 0.0


def test_keyring_throttle_per_key():
    ring = KeyRing(parse_keys(_keys_text(), "test"), burst_s=1.0)
    alice, ops = ring.lookup(ALICE), ring.lookup(OPS)
    assert ring.throttle(alice, 150) == 0.0
    wait = ring.throttle(alice, 1)
    assert 0.4 < wait <= 0.5  # 50 series of debt at 100/s
    assert ring.throttle(ops, 10_000) == 0.0  # no limit
    assert ring.throttle(None, 10_000) == 0.0  # keys off


def _serve_args(*argv):
    import argparse

    from service.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_public_host_without_keys_is_refused_unless_allowed_and_bad_keys_stop_serve(
    tmp_path, capsys, monkeypatch
):
    from service.cli import run

    monkeypatch.delenv("KRONOS_API_KEYS", raising=False)
    monkeypatch.delenv("KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS", raising=False)
    missing = str(tmp_path / "no-such-model")  # fails fast at the model check, before Ray
    assert run(_serve_args("--host", "0.0.0.0", "--model-dir", missing)) == 2
    err = capsys.readouterr().err
    assert "0.0.0.0" in err and "no API keys" in err and "KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS" in err
    assert "cannot load the model" not in err  # refused before the model check
    monkeypatch.setenv("KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS", "true")  # accepted, with a warning
    assert run(_serve_args("--host", "0.0.0.0", "--model-dir", missing)) == 2
    err = capsys.readouterr().err
    assert "WARNING" in err and "no API keys" in err and "cannot load the model" in err
    monkeypatch.delenv("KRONOS_ALLOW_PUBLIC_WITHOUT_KEYS")
    monkeypatch.setenv("KRONOS_API_KEYS", f"{hash_key(OPS)} ops * -")
    assert run(_serve_args("--host", "0.0.0.0", "--model-dir", missing)) == 2
    assert "no API keys" not in capsys.readouterr().err
    monkeypatch.setenv("KRONOS_API_KEYS", "not-a-hash ops * -")
    assert run(_serve_args("--model-dir", missing)) == 2
    assert "invalid API keys" in capsys.readouterr().err and OPS not in err


def test_each_of_several_gateways_allows_its_share_of_the_rate():
    """Two gateway replicas: each bucket holds half the burst and fills at half the rate, so the
    key's rate over both stays at its series/s."""
    one = KeyRing(parse_keys(_keys_text(), "test"), burst_s=1.0)
    two = KeyRing(parse_keys(_keys_text(), "test"), burst_s=1.0, share=2)
    alice = two.lookup(ALICE)
    assert two.buckets[alice.name].rate * 2 == one.buckets[alice.name].rate
    assert two.buckets[alice.name].capacity * 2 == one.buckets[alice.name].capacity
    assert two.throttle(alice, 75) == 0.0
    # 25 series of debt at 50/s (one gateway alone: none)
    assert 0.4 < two.throttle(alice, 1) <= 0.5


def test_a_changed_keys_file_is_read_again_without_a_restart(tmp_path, caplog):
    """Issue 45: rotating a key needed a restart. ``KeyFileWatch`` re-reads the file when its
    stat changes (checked at most every ``KEYS_CHECK_S``): a key added works, a key removed is
    refused, an unchanged key keeps its rate bucket, a broken file keeps the old keys (logged),
    and a file emptied refuses everyone rather than opening the service."""
    import logging

    from service.auth import KEYS_CHECK_S, KeyFileWatch

    f = tmp_path / "keys"
    f.write_text(f"{hash_key(ALICE)} alice forecast 5\n")
    settings = Settings(api_keys_file=str(f))
    watch = KeyFileWatch(settings, load_keyring(settings))
    t = watch.checked
    bucket = watch.ring.buckets["alice"]
    f.write_text(f"{hash_key(ALICE)} alice forecast 5\n{hash_key(OPS)} ops * -\n")
    assert watch.current(now=t).lookup(OPS) is None  # not looked at before KEYS_CHECK_S
    t += KEYS_CHECK_S
    ring = watch.current(now=t)
    assert ring.lookup(OPS).name == "ops" and ring.lookup(ALICE).name == "alice"
    assert ring.buckets["alice"] is bucket
    f.write_text(f"{hash_key(OPS)} ops * -\n")
    t += KEYS_CHECK_S
    assert watch.current(now=t).lookup(ALICE) is None and watch.ring.lookup(OPS) is not None
    with caplog.at_level(logging.ERROR, logger="service.auth"):
        f.write_text("not a key line\n")
        t += KEYS_CHECK_S
        assert watch.current(now=t).lookup(OPS) is not None  # the old keys stay
    assert "API keys not reloaded" in caplog.text and "line 1" in caplog.text
    f.write_text("# every key removed\n")
    t += KEYS_CHECK_S
    ring = watch.current(now=t)
    assert ring.enabled and not ring.keys and ring.lookup(OPS) is None  # closed, not open


def test_a_keys_changed_rate_takes_effect_at_the_reload(tmp_path):
    """Issue 52 (a missed plant): a key whose rate the keys file changes gets a bucket of the new
    rate at the reload (an unchanged key keeps its bucket, tested above), so that 5 -> 50
    series/s admits ten times as much."""
    from service.auth import KEYS_CHECK_S, KeyFileWatch

    f = tmp_path / "keys"
    f.write_text(f"{hash_key(ALICE)} alice forecast 5\n")
    settings = Settings(api_keys_file=str(f), rate_burst_s=1.0)
    watch = KeyFileWatch(settings, load_keyring(settings))
    alice = watch.ring.lookup(ALICE)
    assert watch.ring.throttle(alice, 5) == 0.0 and watch.ring.throttle(alice, 1) == 0.0
    assert watch.ring.throttle(alice, 1) > 0  # 5 series/s, 5 of burst: used up
    f.write_text(f"{hash_key(ALICE)} alice forecast 50\n")
    ring = watch.current(now=watch.checked + KEYS_CHECK_S)
    bucket = ring.buckets["alice"]
    assert (bucket.rate, bucket.capacity) == (50.0, 50.0)
    alice = ring.lookup(ALICE)
    assert ring.throttle(alice, 50) == 0.0  # the new burst
