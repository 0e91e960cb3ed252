"""Code-shape rules of kronos_core/data: short functions, and the sample store builds files
through the format module's public functions only."""

from __future__ import annotations

import ast
from pathlib import Path

import kronos_core.data as data_pkg

DATA = Path(data_pkg.__file__).parent
MAX_LINES = 80


def test_no_function_over_80_lines():
    long = []
    for path in sorted(DATA.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long.append(f"{path.name}:{node.name} ({n} lines)")
    assert long == []


def test_sample_store_uses_no_private_store_helpers_or_format_literals():
    tree = ast.parse((DATA / "sample_store.py").read_text())
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kronos_core.data")
        for alias in node.names
    ]
    assert imported and all(not name.startswith("_") for _, name in imported), imported
    literals = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    assert not {"kronos-kline", ".arrow"} & literals
    assert not any(s.endswith(".arrow") for s in literals)
