"""``/docs`` through the real Serve proxy: the page and every asset it loads come from the
service."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.integration


def test_docs_and_assets_answer_through_serve(live_service):
    page = live_service.client.get("/docs")
    assert page.status_code == 200 and "https://" not in page.text
    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", page.text)
    assert urls and all(u.startswith("/") for u in urls)
    for url in urls:
        assert live_service.client.get(url).status_code == 200, url
