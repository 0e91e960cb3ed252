"""The store's folder: where each symbol's file lives and which symbols and frequencies
it holds (see ``docs/store.md``)::

    ROOT/<frequency>/<symbol>.arrow

``StoreDirectory`` is what ``KlineReader`` and ``KlineWriter`` share: the root, the default
frequency, listing and locating a symbol's file. It opens no file.
"""

from __future__ import annotations

import os
from pathlib import Path

from kronos_core.data.errors import (
    FREQUENCY_PATTERN,
    SYMBOL_PATTERN,
    AmbiguousSymbolError,
    UnknownSymbolError,
    validate_frequency,
    validate_symbol,
)
from kronos_core.data.fileformat import SUFFIX


class StoreDirectory:
    """A store folder, listed and searched. ``frequency``: the default frequency
    sub-directory; when it is None a symbol is found in whichever frequency directory holds
    it (an error if several do and none is chosen)."""

    def __init__(self, root: str | os.PathLike, frequency: str | None = None):
        self.root = Path(root)
        self._prefix = str(self.root) + os.sep  # paths built by string, once validated
        self.frequency = validate_frequency(frequency) if frequency is not None else None
        self._freq_dirs: tuple[int, list[str]] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r}, frequency={self.frequency!r})"

    # -- listing ---------------------------------------------------------------

    def frequencies(self) -> list[str]:
        """Sorted frequency sub-directories present in the store."""
        try:
            mtime = self.root.stat().st_mtime_ns
        except FileNotFoundError:
            return []
        cached = self._freq_dirs
        if cached is not None and cached[0] == mtime:
            return cached[1]
        freqs = sorted(
            e.name
            for e in os.scandir(self.root)
            if e.is_dir() and FREQUENCY_PATTERN.fullmatch(e.name)
        )
        self._freq_dirs = (mtime, freqs)
        return freqs

    def symbols(self, frequency: str | None = None) -> list[str]:
        """Sorted symbols in the store (in one frequency, or in all)."""
        frequency = frequency or self.frequency
        freqs = [validate_frequency(frequency)] if frequency else self.frequencies()
        out: set[str] = set()
        for f in freqs:
            d = self.root / f
            if not d.is_dir():
                continue
            for e in os.scandir(d):
                name = e.name
                if name.endswith(SUFFIX):
                    stem = name[: -len(SUFFIX)]
                    if SYMBOL_PATTERN.fullmatch(stem) and ".." not in stem:
                        out.add(stem)
        return sorted(out)

    def path(self, symbol: str, frequency: str) -> Path:
        """The file of ``symbol`` at ``frequency`` (both validated; the file may not exist)."""
        return self.root / validate_frequency(frequency) / (validate_symbol(symbol) + SUFFIX)

    # -- locating ----------------------------------------------------------------

    def _symbol_index(self) -> dict[str, list[str]]:
        """symbol -> frequencies holding it, from one listing of each frequency directory."""
        index: dict[str, list[str]] = {}
        for f in self.frequencies():
            try:
                entries = os.scandir(self.root / f)
            except FileNotFoundError:
                continue
            with entries:
                for e in entries:
                    if e.name.endswith(SUFFIX) and e.name[0] not in "._":
                        index.setdefault(e.name[: -len(SUFFIX)], []).append(f)
        return index

    def _case_hint(self, symbol: str, frequencies: list[str]) -> str:
        """``; did you mean 'AAPL'?`` when ``symbol`` in upper (or lower) case is stored at one of
        ``frequencies`` (symbols are case-sensitive; import stores them upper case), else ""."""
        for other in dict.fromkeys((symbol.upper(), symbol.lower())):
            if other == symbol:
                continue
            for f in frequencies:
                if os.path.exists(f"{self._prefix}{f}{os.sep}{other}{SUFFIX}"):
                    return f"; did you mean {other!r}? (symbols are case-sensitive)"
        return ""

    def _locate(
        self, symbol: str, frequency: str | None, index: dict[str, list[str]] | None = None
    ) -> tuple[str, str, os.stat_result]:
        if frequency is not None:
            p = f"{self._prefix}{frequency}{os.sep}{symbol}{SUFFIX}"
            try:
                return p, frequency, os.stat(p)
            except FileNotFoundError:
                raise UnknownSymbolError(
                    symbol,
                    f"unknown symbol {symbol!r} at frequency {frequency!r} in store {self.root}"
                    + self._case_hint(symbol, [frequency]),
                ) from None
        found = []
        for f in self.frequencies() if index is None else index.get(symbol, ()):
            p = f"{self._prefix}{f}{os.sep}{symbol}{SUFFIX}"
            try:
                found.append((p, f, os.stat(p)))
            except FileNotFoundError:
                continue
        if not found:
            raise UnknownSymbolError(symbol, f"unknown symbol {symbol!r} in store {self.root}"
                                     + self._case_hint(symbol, self.frequencies()))
        if len(found) > 1:
            raise AmbiguousSymbolError(
                symbol,
                f"symbol {symbol!r} is stored at several frequencies {[f for _, f, _ in found]}; "
                "choose one with frequency=",
            )
        return found[0]
