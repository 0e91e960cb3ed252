"""docs/architecture.md's folder table against the code: every import between the project's
folders is one the table allows, every package folder has a row, and no module-level cycle."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _module_graph():
    spec = importlib.util.spec_from_file_location(
        "module_graph", REPO / "scripts" / "module_graph.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mg = _module_graph()


def _rules() -> dict[str, set[str]]:
    """folder -> folders it may import, from the table's rows (``every `kronos_core` folder``
    stands for all of them)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    folders = {str(p.parent.relative_to(REPO)) for p in REPO.glob("kronos_core/**/__init__.py")}
    rules = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").split()[0].strip("`")
        allowed = set(re.findall(r"`([\w/]+)`", cells[2]))
        if "every `kronos_core` folder" in cells[2]:
            allowed |= folders
        rules[folder] = allowed
    return rules


def _folder(path: Path) -> str:
    return str(path.relative_to(REPO).parent)


def test_every_import_between_folders_is_allowed_by_the_table():
    rules = _rules()
    mods = mg.collect(mg.PACKAGES)
    bad = []
    for name, path in mods.items():
        here = _folder(path)
        assert here in rules, f"{here} has no row in docs/architecture.md"
        for target in mg.imports_of(name, path, mods):
            there = _folder(mods[target])
            if there != here and there not in rules[here]:
                bad.append(f"{name} -> {target} ({here} may not import {there})")
    assert not bad, bad


def test_the_table_parses_and_names_real_folders():
    rules = _rules()
    assert {"kronos_core/model", "service", "service/gateway", "loadtests"} <= set(rules)
    assert rules["kronos_core/model"] == {"kronos_core/base"}
    for folder in rules:
        if folder not in ("deploy", "scripts", "tests"):
            assert (REPO / folder).is_dir(), folder


def test_no_import_cycle_between_modules():
    assert mg.figures()["cycles"] == []
