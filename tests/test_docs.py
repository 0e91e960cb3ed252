"""The docs name only error codes and ``EngineStats`` fields that exist, and the error-code
tables of docs/service.md list exactly the codes of ``kronos_core.base.errors``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kronos_core.base.errors import ErrorCode, WarningCode
from kronos_core.engine.generate import EngineStats

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]
CODES = {c.value for c in ErrorCode} | {c.value for c in WarningCode}
SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def _source_names() -> set[str]:
    names: set[str] = set()
    for d in ("kronos_core", "service"):
        for p in (REPO / d).rglob("*.py"):
            names |= set(re.findall(r"\w+", p.read_text()))
    # a Prometheus counter declared as kronos_x is exposed (and documented) as kronos_x_total
    return names | {f"{n}_total" for n in names if n.startswith("kronos_")}


def test_service_docs_tables_list_exactly_the_codes():
    text = (REPO / "docs" / "service.md").read_text()
    section = text[text.index("### Error codes"):]
    tables = re.split(r"\n(?=Warnings)", section, maxsplit=1)
    errors = set(re.findall(r"^\| `([a-z_]+)` \|", tables[0].split("\n## ", 1)[0], re.M))
    warnings = set(
        re.findall(
            r"^\| `([a-z_]+)` \|", tables[1].split("\n## ", 1)[0].split("\n\nWith", 1)[0], re.M
        )
    )
    assert errors == {c.value for c in ErrorCode}
    assert warnings == {c.value for c in WarningCode}


def test_codes_named_in_the_docs_exist():
    """Any snake_case name on a doc line that speaks of codes is a code or a name in the source."""
    known = CODES | _source_names()
    stale = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            if not re.search(r"\bcodes?\b", line, re.I):
                continue
            stale += [
                f"{doc.name}:{i}: {name}" for name in SNAKE.findall(line) if name not in known
            ]
    assert not stale, stale
    for doc in DOCS:  # ErrorCode.MEMBER spellings
        for member in re.findall(r"(?:Error|Warning)Code\.([A-Z_]+)", doc.read_text()):
            assert member in ErrorCode.__members__ or member in WarningCode.__members__, (
                doc.name, member,
            )


def test_engine_stats_fields_named_in_the_docs_exist():
    fields = {f.name for f in dataclasses.fields(EngineStats)}
    fields |= {n for n, v in vars(EngineStats).items() if isinstance(v, property)}
    seen = 0
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            if "EngineStats:" not in line:
                continue
            listed = [w.strip(" .`") for w in line.split("EngineStats:", 1)[1].split(",")]
            named = [w for w in listed if w and w != "..."]
            seen += len(named)
            missing = [w for w in named if w not in fields]
            assert not missing, (doc.name, missing)
    assert seen >= 3  # the docs do list the fields somewhere


def test_configuration_tables_list_every_setting():
    """README.md and docs/service.md list every service setting (KRONOS_<FIELD>), and no other."""
    import pytest

    settings = pytest.importorskip("service.common.settings")
    fields = {f"KRONOS_{name.upper()}" for name in settings.Settings.model_fields}
    for doc in (REPO / "README.md", REPO / "docs" / "service.md"):
        text = doc.read_text()
        table = text[text.index("| flag | environment | default | meaning |"):].split("\n\n", 1)[0]
        named = set(re.findall(r"`(KRONOS_[A-Z0-9_]+)`", table))
        assert named == fields, (doc.name, sorted(fields - named), sorted(named - fields))
