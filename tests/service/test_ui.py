"""``/ui`` (the forecast explorer) and ``/v1/candles``' answer, without Ray: the page and its
assets come from the package and load nothing from outside; with keys on they are served
without a key while every API call the page makes is checked (401 without a key, 403 without
the route's scope, ``candles`` a scope of its own); the candles around ``as_of`` are the store's,
the history exactly what a forecast ``as_of`` the same time reads."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ray.serve")
from fastapi.testclient import TestClient  # noqa: E402

from service.app import api  # noqa: E402
from service.auth import KeyRing, app_path, hash_key, is_open, parse_keys  # noqa: E402
from service.state import current  # noqa: E402
from service.ui import ASSETS, STATIC, candles_answer  # noqa: E402

VIEWER, FORECASTER = "viewer-secret", "forecaster-secret"


@pytest.fixture
def client():
    with TestClient(api) as c:
        yield c


@pytest.fixture
def keyed(monkeypatch):
    ring = KeyRing(parse_keys(
        f"{hash_key(VIEWER)} viewer forecast,models,symbols,candles -\n"
        f"{hash_key(FORECASTER)} forecaster forecast,models,symbols -\n", "test"))
    monkeypatch.setattr(current(), "keyring", ring)
    with TestClient(api) as c:
        yield c


def _urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""", html)


def test_the_page_and_its_assets_are_the_packaged_files_and_load_nothing_from_outside(client):
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.content == (STATIC / "ui" / "index.html").read_bytes()
    urls = [u for u in _urls(page.text) if not u.startswith("data:")]
    # relative URLs only: the page also works under a route prefix, and never reaches out
    assert urls and all(u.startswith("ui/assets/") for u in urls), urls
    assert {u.removeprefix("ui/assets/") for u in urls} == set(ASSETS)
    for name, (file, media) in ASSETS.items():
        r = client.get(f"/ui/assets/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media)
        assert r.content == (STATIC / file).read_bytes()
        assert not re.search(r"""(fetch|src=|href=)\s*\(?\s*['"]https?://""", r.text), name
    assert client.get("/ui/assets/index.html").status_code == 404  # only the listed files
    assert client.get("/ui/assets/..%2Fvendor%2FREADME.md").status_code == 404


def test_every_vendored_library_has_its_licence_beside_it():
    vendor = STATIC / "vendor"
    for folder in (p for p in vendor.iterdir() if p.is_dir()):
        assert (folder / "LICENSE").is_file(), folder
        assert "Apache License" in (folder / "LICENSE").read_text(), folder
    assert "lightweight-charts" in (vendor / "README.md").read_text()


def test_package_data_ships_the_static_files():
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"service" = ["static/**/*"]' in pyproject


def test_with_keys_on_the_page_needs_no_key_and_its_api_calls_do(keyed):
    assert keyed.get("/ui").status_code == 200
    assert keyed.get("/ui/assets/app.js").status_code == 200
    assert keyed.get("/ui/assets/lightweight-charts.js").status_code == 200
    # the calls the page makes: as for any client
    r = keyed.get("/v1/models")
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert keyed.get("/v1/symbols", headers={"X-API-Key": "wrong"}).status_code == 401
    r = keyed.get("/v1/candles?symbol=GOOG", headers={"X-API-Key": FORECASTER})
    assert r.status_code == 403 and "candles" in r.json()["detail"]
    r = keyed.get("/v1/accuracy", headers={"X-API-Key": VIEWER})
    assert r.status_code == 403 and "accuracy" in r.json()["detail"]
    assert keyed.get("/docs", headers={"X-API-Key": VIEWER}).status_code == 403


def test_paths_are_checked_below_the_route_prefix():
    scope = {"path": "/keyed/v1/candles", "root_path": "/keyed"}
    assert app_path(scope) == "/v1/candles"
    assert app_path({"path": "/v1/candles", "root_path": ""}) == "/v1/candles"
    assert is_open(app_path({"path": "/keyed/ui/assets/app.js", "root_path": "/keyed"}))
    assert is_open("/ui") and not is_open("/ui/other") and not is_open("/v1/forecast")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from kronos_core.data.store import KlineStore

    root = tmp_path_factory.mktemp("store")
    ts = pd.date_range("2024-01-01", periods=40, freq="D")
    close = np.linspace(10, 20, 40)
    frame = pd.DataFrame({
        "timestamps": ts, "open": close, "high": close + 1, "low": close - 1, "close": close,
        "volume": np.arange(40.0), "amount": np.arange(40.0) * 15,
    })
    s = KlineStore(root)
    s.write("AAA", frame, frequency="1d")
    return s, frame


def test_candles_around_as_of_are_the_stored_ones(store):
    s, frame = store
    as_of = frame["timestamps"][29]
    out = candles_answer(s, "AAA", before=10, after=5, as_of=as_of)
    hist, after = out["history"], out["after"]
    assert hist["timestamps"][-1] == "2024-01-30T00:00:00" and len(hist["timestamps"]) == 10
    np.testing.assert_allclose(hist["candles"]["close"], frame["close"][20:30], rtol=1e-6)
    np.testing.assert_allclose(hist["candles"]["volume"], frame["volume"][20:30])
    assert after["timestamps"] == [f"2024-01-{d}T00:00:00" for d in range(31, 32)] + [
        f"2024-02-0{d}T00:00:00" for d in range(1, 5)
    ]
    np.testing.assert_allclose(after["candles"]["close"], frame["close"][30:35], rtol=1e-6)
    # the history is what a forecast as_of the same time reads
    window = s.read_windows(["AAA"], 10, as_of=as_of).windows[0]
    np.testing.assert_allclose(hist["candles"]["open"], window.values[:, 0])
    # without as_of: the latest candles, nothing after
    latest = candles_answer(s, "AAA", before=3, after=5)
    assert latest["history"]["timestamps"][-1] == "2024-02-09T00:00:00"
    assert latest["after"]["timestamps"] == []


def test_a_symbol_the_store_cannot_give_is_a_404_with_its_reason(store):
    from fastapi import HTTPException

    s, frame = store
    with pytest.raises(HTTPException) as caught:
        candles_answer(s, "NOPE", before=10, after=0)
    assert caught.value.status_code == 404
    assert "NOPE" in caught.value.detail and "unknown_symbol" in caught.value.detail
    with pytest.raises(HTTPException, match="no_data"):
        candles_answer(s, "AAA", before=10, after=0, as_of="2023-06-01")
