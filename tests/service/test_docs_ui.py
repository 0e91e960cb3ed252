"""``/docs`` works offline: the page references only the service's own URLs, and each of them
answers 200 with the vendored Swagger UI file (swagger-ui-dist 5, which reads OpenAPI 3.1)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("ray.serve")
from fastapi.testclient import TestClient  # noqa: E402

from service.app import api  # noqa: E402
from service.docs_ui import ASSETS, assets_dir  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with TestClient(api) as c:
        yield c


def _urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", html)


def test_docs_page_loads_only_local_urls(client):
    r = client.get("/docs")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    urls = _urls(r.text)
    assert len(urls) >= 4, urls  # the script, the stylesheet, the icon, the OpenAPI document
    remote = [u for u in urls if not u.startswith("/")]
    assert not remote, f"/docs needs the internet for {remote}"
    assert "cdn." not in r.text and "https://" not in r.text
    for url in urls:
        answer = client.get(url)
        assert answer.status_code == 200, url
        assert len(answer.content) > 100, url


def test_assets_are_the_packaged_files(client):
    for name, media in ASSETS.items():
        r = client.get(f"/docs/assets/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media)
        assert r.content == (assets_dir() / name).read_bytes()
    # only the listed files
    assert client.get("/docs/assets/swagger-ui-bundle.js.map").status_code == 404
    assert client.get("/docs/assets/..%2F..%2F__init__.py").status_code == 404
    assert client.get("/redoc").status_code == 404  # ReDoc loads from a CDN: off


def test_the_swagger_ui_reads_the_openapi_version_served(client):
    """Swagger UI 4 refused OpenAPI 3.1 ("does not specify a valid version field"): the vendored
    one is 5.x, and the served schema is 3.1 (the browser test renders it)."""
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = (assets_dir() / "swagger-ui-bundle.js").read_text()
    assert re.search(r'"5\.\d+\.\d+"', bundle)
    assert (assets_dir() / "LICENSE").is_file()
