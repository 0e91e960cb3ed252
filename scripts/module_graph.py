"""Module-graph figures of the project's own packages: modules, import edges between them,
import cycles, imports against the layer order, and the largest modules by line count.

    python scripts/module_graph.py            # kronos_core, service, loadtests
    python scripts/module_graph.py --json     # the same as JSON

Reads the source with ``ast`` (nothing is imported or run). An edge is ``a -> b`` when module
``a`` imports module ``b`` (or a name from it) anywhere in its body, ``TYPE_CHECKING`` blocks and
function-local imports included: a cycle hidden behind either is still a cycle. Importing a
package's ``__init__`` for a name that is really a submodule counts as an edge to that submodule.

The layer order is the row order of the folder table in ``docs/architecture.md`` (bottom layer
first). A module's folder is the directory holding it, so a package's own top-level modules
(``kronos_core/predictor.py``, ``service/app.py``) form the folder ``kronos_core`` or
``service``. An import against the layer order is one from a folder to a folder at the same
row or below it in the table, other than its own; folder cycles are sets of folders that import
each other, directly or round a chain.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kronos_core", "service", "loadtests")
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def collect(packages: tuple[str, ...]) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in packages:
        base = ROOT / pkg
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            mods[module_name(path)] = path
    return mods


def resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` is or lies inside."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = resolve(alias.name, mods)
                if target:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                target = resolve(f"{prefix}.{alias.name}", mods) or resolve(prefix, mods)
                if target:
                    out.add(target)
    out.discard(mod)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def folder_of(path: Path) -> str:
    """The folder a module belongs to: the directory holding its file, relative to the root."""
    return path.relative_to(ROOT).parent.as_posix()


def table_rows(text: str | None = None) -> list[tuple[str, str]]:
    """(folder, may-import cell) for each row of docs/architecture.md's folder table, in the
    table's order (the layer order, bottom layer first)."""
    text = ARCHITECTURE.read_text() if text is None else text
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        match = re.match(r"`([\w/]+)`", cells[0])
        if match:
            rows.append((match.group(1), cells[2]))
    return rows


def layer_order(text: str | None = None) -> list[str]:
    """The folders of the table, bottom layer first."""
    return [folder for folder, _ in table_rows(text)]


def folder_graph(mods: dict[str, Path], graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """folder -> the other folders its modules import."""
    out: dict[str, set[str]] = {folder_of(p): set() for p in mods.values()}
    for mod, targets in graph.items():
        here = folder_of(mods[mod])
        out[here] |= {folder_of(mods[t]) for t in targets} - {here}
    return out


def against_layers(
    mods: dict[str, Path], graph: dict[str, set[str]], order: list[str]
) -> list[str]:
    """Module imports whose target folder is not listed above the importer's folder in
    ``order`` (a folder missing from the table counts as against the order)."""
    rank = {folder: i for i, folder in enumerate(order)}
    bad = []
    for mod in sorted(graph):
        here = folder_of(mods[mod])
        for target in sorted(graph[mod]):
            there = folder_of(mods[target])
            if there == here:
                continue
            if here not in rank or there not in rank or rank[there] >= rank[here]:
                bad.append(f"{mod} -> {target} ({here} -> {there})")
    return bad


def figures(packages: tuple[str, ...] = PACKAGES) -> dict:
    mods = collect(packages)
    graph = {m: imports_of(m, p, mods) for m, p in mods.items()}
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    largest = sorted(lines.items(), key=lambda kv: -kv[1])[:5]
    return {
        "modules": len(mods),
        "import_edges": sum(len(v) for v in graph.values()),
        "cycles": cycles(graph),
        "folder_cycles": cycles(folder_graph(mods, graph)),
        "against_layer_order": against_layers(mods, graph, layer_order()),
        "largest": [{"module": m, "lines": n} for m, n in largest],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("packages", nargs="*", default=list(PACKAGES))
    args = ap.parse_args(argv)
    fig = figures(tuple(args.packages))
    if args.json:
        print(json.dumps(fig, indent=2))
        return 0
    print(f"modules: {fig['modules']}")
    print(f"import edges: {fig['import_edges']}")
    print(f"import cycles: {len(fig['cycles'])}")
    for c in fig["cycles"]:
        print("  " + " <-> ".join(c))
    print(f"folder cycles: {len(fig['folder_cycles'])}")
    for c in fig["folder_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"imports against the layer order: {len(fig['against_layer_order'])}")
    for edge in fig["against_layer_order"]:
        print("  " + edge)
    print("largest modules:")
    for row in fig["largest"]:
        print(f"  {row['lines']:5d}  {row['module']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
