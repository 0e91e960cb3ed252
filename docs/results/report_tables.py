"""Helpers of the table scripts in docs/results (``*/tables.py``): read a ``kronos eval``
report and format its figures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def load(path: Path) -> dict:
    """A report's JSON, gzipped (``.gz``) or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def group_rows(report: dict, h: str) -> dict:
    """The report's per-group rows at horizon ``h``, by (hold-out, market, frequency)."""
    return {(r["holdout"], r["market"], r["frequency"]): r
            for r in report["groups"]["horizons"][h]}


def fmt(v, d: int = 3) -> str:
    return "—" if v is None else f"{v:.{d}f}"
