"""docs/architecture.md's folder table against the code: every import between the project's
folders is one the table allows, every package folder has a row, no module-level cycle, no two
folders import each other (a package's own top-level modules count as one folder), and every
import points up the table's order (the layer order)."""

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
    folders = {str(p.parent.relative_to(REPO)) for p in REPO.glob("kronos_core/**/__init__.py")}
    rules = {}
    for folder, cell in mg.table_rows():
        allowed = set(re.findall(r"`([\w/]+)`", cell))
        if "every `kronos_core` folder" in cell:
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


def test_no_two_folders_import_each_other():
    mods = mg.collect(mg.PACKAGES)
    graph = {m: mg.imports_of(m, p, mods) for m, p in mods.items()}
    folders = mg.folder_graph(mods, graph)
    pairs = sorted(f"{a} <-> {b}" for a in folders for b in folders[a] if a < b and a in folders[b])
    assert not pairs, pairs
    assert mg.figures()["folder_cycles"] == []


def test_every_import_points_up_the_layer_order():
    assert mg.figures()["against_layer_order"] == []


def test_the_table_order_is_the_layer_order():
    """A row lists as importable only folders above it, so the table reads bottom to top."""
    order = mg.layer_order()
    rank = {folder: i for i, folder in enumerate(order)}
    assert len(rank) == len(order), "a folder has two rows"
    for folder, allowed in _rules().items():
        below = sorted(a for a in allowed - {folder} if a in rank and rank[a] >= rank[folder])
        assert not below, f"{folder} may import {below}, which are not above it in the table"


def _planted(edges: list[tuple[str, str]]) -> tuple[dict[str, Path], dict[str, set[str]]]:
    """A synthetic module graph: (importer, imported) module names under the repository."""
    names = {n for edge in edges for n in edge}
    mods = {n: REPO.joinpath(*n.split(".")).with_suffix(".py") for n in names}
    graph: dict[str, set[str]] = {n: set() for n in names}
    for a, b in edges:
        graph[a].add(b)
    return mods, graph


def test_the_checks_catch_a_planted_upward_import():
    """The two rules can fail: an import from the base layer up into the engine is against the
    order, and a second one back down makes the two folders import each other."""
    order = mg.layer_order()
    up = ("kronos_core.base.candles", "kronos_core.engine.job")
    down = ("kronos_core.engine.job", "kronos_core.base.options")
    mods, graph = _planted([down])
    assert mg.against_layers(mods, graph, order) == []
    assert mg.cycles(mg.folder_graph(mods, graph)) == []
    mods, graph = _planted([up, down])
    assert mg.against_layers(mods, graph, order) == [
        "kronos_core.base.candles -> kronos_core.engine.job "
        "(kronos_core/base -> kronos_core/engine)"
    ]
    assert mg.cycles(mg.folder_graph(mods, graph)) == [["kronos_core/base", "kronos_core/engine"]]
    top = ("kronos_core.predictor", "kronos_core.cli.main")
    mods, graph = _planted([top])
    assert len(mg.against_layers(mods, graph, order)) == 1
