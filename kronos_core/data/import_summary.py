"""What an import says at the end: counts per symbol (not per file and symbol) and its
warnings summarised once per import, not once per file.

A day's vendor folder of 900 files used to print two warnings a file (an unused ``symbol``
column, ordinary trading suspensions as missing sessions): warnings that always fire teach
people to ignore the ones that matter. Here each kind of warning is one line naming how many
symbols had it and which (the first few), and missing sessions are one line of counts per
symbol. ``kronos -v import`` still logs every file's own warnings (DEBUG).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

GAP_PREFIX = "missing sessions: "
SYMBOLS_SHOWN = 8  # symbols named per summarised warning
GAPS_SHOWN = 20  # symbols (with their counts) named in the missing-sessions line
_GAP_COUNT = re.compile(r"^missing sessions: ([0-9]+) of the ([0-9]+) (\S+) sessions")


class Outcome(Protocol):
    """What the summary reads of an ``importer.ImportOutcome``."""

    file: str
    symbol: str | None
    rows_written: int
    error: str | None
    warnings: tuple[str, ...]
    changed: bool
    held_back: bool


@dataclass(frozen=True)
class ImportCounts:
    """An import's counts, each symbol once (a symbol in four day files is one symbol)."""

    files: int
    changed: int  # symbols whose file the import rewrote
    candles: int  # candles added over them
    unchanged: int  # symbols already stored as they are
    failed: int  # failed (file, symbol) pairs
    held_back: int  # valid files with new candles not published (all-or-nothing refusal)

    def line(self) -> str:
        held = (f"; {self.held_back} valid file(s) not published: the import is all-or-nothing; "
                "fix the failed one(s) and rerun (or publish the others with --partial)"
                if self.held_back else "")
        return (f"{self.files} file(s), {self.changed} symbol(s) changed (+{self.candles} "
                f"candles), {self.unchanged} unchanged, {self.failed} failed{held}")


def import_counts(outcomes: Sequence[Outcome], files: int) -> ImportCounts:
    ok = [o for o in outcomes if o.error is None]
    changed = {o.symbol for o in ok if o.changed}
    unchanged = {o.symbol for o in ok if not o.changed} - changed
    return ImportCounts(
        files=files, changed=len(changed), candles=sum(o.rows_written for o in ok if o.changed),
        unchanged=len(unchanged), failed=len(outcomes) - len(ok),
        held_back=len({o.file for o in ok if o.held_back}),
    )


def _kind(text: str) -> str:
    """A warning's kind: its text with numbers and quoted names blanked, so the same warning
    about other files, rows or columns falls together."""
    return re.sub(r"[0-9]+", "#", re.sub(r"'[^']*'", "'…'", text))


def _names(symbols: list[str], shown: int) -> str:
    more = f" and {len(symbols) - shown} more" if len(symbols) > shown else ""
    return ", ".join(symbols[:shown]) + more


def warning_summary(outcomes: Sequence[Outcome]) -> list[str]:
    """The import's warnings as a few lines: one per kind (a warning only one symbol had is
    given whole, with its file), and one line of missing sessions per symbol."""
    groups: dict[str, list[tuple[Outcome, str]]] = {}
    for o in outcomes:
        for text in o.warnings:
            key = "gaps" if text.startswith(GAP_PREFIX) else _kind(text)
            groups.setdefault(key, []).append((o, text))
    lines = []
    for key, items in groups.items():
        if len(items) == 1:
            o, text = items[0]
            lines.append(f"{o.file} [{o.symbol}]: {text}")
        elif key == "gaps":
            lines.append(_gap_line(items))
        else:
            texts = {t for _, t in items}
            symbols = sorted({str(o.symbol) for o, _ in items})
            alike = "" if len(texts) == 1 else " (and the like)"
            names = _names(symbols, SYMBOLS_SHOWN)
            lines.append(f"{len(symbols)} symbol(s): {items[0][1]}{alike} [{names}]")
    return lines


def _gap_line(items: list[tuple[Outcome, str]]) -> str:
    """One line for many symbols' missing sessions: the count per symbol, most first."""
    counts: dict[str, int] = {}
    venues = set()
    for o, text in items:
        m = _GAP_COUNT.match(text)
        counts[str(o.symbol)] = counts.get(str(o.symbol), 0) + (int(m.group(1)) if m else 0)
        if m:
            venues.add(m.group(3))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{s} {n}" for s, n in ranked[:GAPS_SHOWN])
    more = (f" and {len(ranked) - GAPS_SHOWN} more (kronos -v import lists each)"
            if len(ranked) > GAPS_SHOWN else "")
    return (f"missing sessions (trading suspensions or gaps) in {len(ranked)} symbol(s) "
            f"({', '.join(sorted(venues))}), sessions with no candle per symbol: {shown}{more}; "
            "the model reads a gap as consecutive candles")
