"""``loadtests/`` drives the service from outside: the service never imports it, and ``service/``
holds the request path only (no soak, load-test, locust or benchmark module)."""

from __future__ import annotations

import re
from pathlib import Path

from import_rules import lines_naming

REPO = Path(__file__).resolve().parents[2]


def test_the_service_never_imports_the_load_tools():
    offenders = lines_naming("service", "loadtests")
    assert not offenders, offenders


def test_the_service_holds_no_load_tool_module():
    tools = [
        p.name
        for p in (REPO / "service").rglob("*.py")
        if re.match(r"(soak|loadtest|locust|bench)", p.name)
    ]
    assert not tools, tools
