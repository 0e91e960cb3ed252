"""Per-symbol metadata an import records beside the candles: what a symbol's daily price limit
depends on (``kronos_core.base.price_limits``): ``special_treatment`` (ST, *ST), ``board`` and
``listed`` (first trading day).

They come from ``kronos import`` flags (``--st SYMBOL...``, ``--not-st SYMBOL...``, ``--board``)
or from optional columns of the ``--symbol-map`` file, found by their header: ``st`` (or
``special_treatment``: yes/no, empty: unknown), ``board`` (main, star, chinext, bse, none) and
``listed`` (YYYY-MM-DD). Values are checked here, so the store only ever holds ones the rules read.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping

import numpy as np

from kronos_core.base.candles import CandleError
from kronos_core.base.price_limits import BOARDS, NO_LIMIT_BOARD, parse_flag

_COLUMNS = {"st": "special_treatment", "special_treatment": "special_treatment",
            "board": "board", "listed": "listed"}


def check_board(value: str, where: str) -> str:
    """``value`` as a board name (lower case); ``CandleError`` naming ``where`` otherwise."""
    board = str(value).strip().lower()
    if board not in (*BOARDS, NO_LIMIT_BOARD):
        raise CandleError(f"{where}: board must be one of {(*BOARDS, NO_LIMIT_BOARD)}, "
                          f"got {value!r}")
    return board


def check_listed(value: str, where: str) -> str:
    """``value`` as a ``YYYY-MM-DD`` date; ``CandleError`` naming ``where`` otherwise."""
    try:
        return str(np.datetime64(str(value).strip(), "D"))
    except ValueError:
        raise CandleError(f"{where}: listed must be a date (YYYY-MM-DD), got {value!r}") from None


def read_symbol_details(path: str | os.PathLike) -> dict[str, dict]:
    """The price-limit columns of a symbol-map file, per store symbol (upper case, as stored):
    ``{symbol: {special_treatment, board, listed}}`` with only the cells given. A file without
    such columns gives ``{}``. ``CandleError`` names the file, row and value of a bad cell."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise CandleError(f"--symbol-map {path}: cannot read: {exc}") from None
    if not rows:
        return {}
    header = [c.strip().lower() for c in rows[0]]
    wanted = {k: _COLUMNS[name] for k, name in enumerate(header) if k >= 2 and name in _COLUMNS}
    out: dict[str, dict] = {}
    for i, row in enumerate(rows[1:], start=1):
        if len(row) < 2 or not row[1].strip():
            continue  # read_symbol_map reports it
        where = f"--symbol-map {path}: row {i}"
        details: dict = {}
        for k, key in wanted.items():
            cell = row[k].strip() if k < len(row) else ""
            if not cell:
                continue
            if key == "special_treatment":
                try:
                    details[key] = parse_flag(cell, f"{where}: st")
                except ValueError as exc:
                    raise CandleError(str(exc)) from None
            elif key == "board":
                details[key] = check_board(cell, where)
            else:
                details[key] = check_listed(cell, where)
        if details:
            out[row[1].strip().upper()] = details
    return out


def flag_details(st: Iterable[str] = (), not_st: Iterable[str] = (),
                 board: str | None = None) -> tuple[dict[str, dict], dict]:
    """(per-symbol details from ``--st`` / ``--not-st``, details for every symbol from
    ``--board``); ``CandleError`` when a symbol is named by both flags."""
    st_set = {s.strip().upper() for s in st}
    not_set = {s.strip().upper() for s in not_st}
    both = sorted(st_set & not_set)
    if both:
        raise CandleError(f"--st and --not-st both name {', '.join(both)}")
    per = {s: {"special_treatment": True} for s in st_set}
    per.update({s: {"special_treatment": False} for s in not_set})
    common = {} if board is None else {"board": check_board(board, "--board")}
    return per, common


def merge_details(*sources: Mapping[str, dict]) -> dict[str, dict]:
    """Per-symbol details of several sources, later ones winning key by key."""
    out: dict[str, dict] = {}
    for source in sources:
        for symbol, details in source.items():
            out.setdefault(symbol, {}).update(details)
    return out
