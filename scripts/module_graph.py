"""Module-graph figures of the project's own packages: modules, import edges between them,
import cycles, and the largest modules by line count.

    python scripts/module_graph.py            # kronos_core, service, loadtests
    python scripts/module_graph.py --json     # the same as JSON

Reads the source with ``ast`` (nothing is imported or run). An edge is ``a -> b`` when module
``a`` imports module ``b`` (or a name from it) anywhere in its body, ``TYPE_CHECKING`` blocks and
function-local imports included: a cycle hidden behind either is still a cycle. Importing a
package's ``__init__`` for a name that is really a submodule counts as an edge to that submodule.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kronos_core", "service", "loadtests")


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


def figures(packages: tuple[str, ...] = PACKAGES) -> dict:
    mods = collect(packages)
    graph = {m: imports_of(m, p, mods) for m, p in mods.items()}
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    largest = sorted(lines.items(), key=lambda kv: -kv[1])[:5]
    return {
        "modules": len(mods),
        "import_edges": sum(len(v) for v in graph.values()),
        "cycles": cycles(graph),
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
    print("largest modules:")
    for row in fig["largest"]:
        print(f"  {row['lines']:5d}  {row['module']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
