"""Which package may import which (docs/architecture.md): a helper for the tests that hold
one folder of the repository to never name another package."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lines_naming(folder: str, package: str) -> list[str]:
    """``path:line`` of every line under ``REPO/folder`` that imports ``package`` or names one
    of its modules in a string (``"service.app"``: an import by name, a Serve import path)."""
    pattern = re.compile(rf"""(^\s*(from|import)\s+{package}\b)|["']{package}\.\w""")
    return [
        f"{p.relative_to(REPO)}:{i}"
        for p in (REPO / folder).rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
