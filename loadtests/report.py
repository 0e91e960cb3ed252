"""How the load tools report: Markdown tables for the summaries, and a benchmark's figures
printed and written as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a Markdown table: ``header``, the rule, one line per row (cells as text)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def publish(figures: dict, json_path: str | None, summary: str) -> None:
    """A benchmark's figures: as indented JSON on stdout, then its one-line ``summary``, and
    written to ``json_path`` when one is given."""
    print(json.dumps(figures, indent=2))
    print(summary)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=2)
