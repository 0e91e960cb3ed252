"""``loadtests/`` drives the service from outside: the service never imports it, and ``service/``
holds the request path only (no soak, load-test, locust or benchmark module)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_service_never_imports_the_load_tools():
    offenders = [
        f"{p.relative_to(REPO)}:{i}"
        for p in (REPO / "service").rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"""(^\s*(from|import)\s+loadtests\b)|["']loadtests\.\w""", line)
    ]
    assert not offenders, offenders


def test_the_service_holds_no_load_tool_module():
    tools = [p.name for p in (REPO / "service").rglob("*.py") if re.match(r"(soak|loadtest|locust|bench)", p.name)]
    assert not tools, tools
