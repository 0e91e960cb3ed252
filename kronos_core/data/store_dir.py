"""The store's folder: where each symbol's file lives and which symbols and frequencies
it holds (see ``docs/store.md``)::

    ROOT/_manifest.json                  the published version (a versioned store)
    ROOT/<frequency>/<symbol>.arrow      generation 0 (an unversioned store's files)
    ROOT/<frequency>/_v/<symbol>.<g>.arrow   generation g, written by version g

``StoreDirectory`` is what ``KlineReader`` and ``KlineWriter`` share: the root, the default
frequency, the published version (``manifest``), listing and locating a symbol's file. It
opens no data file. In a versioned store the manifest alone says which symbols exist and
where their files are (``kronos_core.data.versions``); without one, the directory listing does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kronos_core.data.errors import (
    FREQUENCY_PATTERN,
    SYMBOL_PATTERN,
    AmbiguousSymbolError,
    CorruptFileError,
    UnknownSymbolError,
    validate_frequency,
    validate_symbol,
)
from kronos_core.data.fileformat import SUFFIX
from kronos_core.data.versions import Manifest, read_manifest

CURRENT: Any = object()  # ``manifest=`` default: read the published manifest now


class StoreDirectory:
    """A store folder, listed and searched. ``frequency``: the default frequency
    sub-directory; when it is None a symbol is found in whichever frequency directory holds
    it (an error if several do and none is chosen)."""

    def __init__(self, root: str | os.PathLike, frequency: str | None = None):
        self.root = Path(root)
        self._prefix = str(self.root) + os.sep  # paths built by string, once validated
        self.frequency = validate_frequency(frequency) if frequency is not None else None
        self._freq_dirs: tuple[int, list[str]] | None = None
        self._manifest: Manifest | None = None

    # -- versions ----------------------------------------------------------------

    def manifest(self) -> Manifest | None:
        """The published version's manifest (re-read only when its file changed; one stat),
        or None for an unversioned store. Raises ``ManifestError`` if it cannot be read."""
        self._manifest = read_manifest(self.root, self._manifest)
        return self._manifest

    @property
    def version(self) -> int:
        """The published store version (0: an unversioned store)."""
        m = self.manifest()
        return 0 if m is None else m.version

    def _resolve(self, manifest: Any) -> Manifest | None:
        return self.manifest() if manifest is CURRENT else manifest

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r}, frequency={self.frequency!r})"

    # -- listing ---------------------------------------------------------------

    def frequencies(self, manifest: Any = CURRENT) -> list[str]:
        """Sorted frequencies present in the store (of ``manifest``'s version)."""
        m = self._resolve(manifest)
        if m is not None:
            return sorted(f for f, syms in m.files.items() if syms)
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

    def symbols(self, frequency: str | None = None, manifest: Any = CURRENT) -> list[str]:
        """Sorted symbols in the store (in one frequency, or in all; of ``manifest``'s
        version)."""
        frequency = frequency or self.frequency
        m = self._resolve(manifest)
        freqs = [validate_frequency(frequency)] if frequency else self.frequencies(m)
        out: set[str] = set()
        if m is not None:
            for f in freqs:
                out.update(m.files.get(f, ()))
            return sorted(out)
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
        """The file of ``symbol`` at ``frequency`` in the published version (both validated;
        the file may not exist)."""
        validate_frequency(frequency)
        validate_symbol(symbol)
        m = self.manifest()
        found = None if m is None else m.path(str(self.root), frequency, symbol)
        return Path(found) if found else self.root / frequency / (symbol + SUFFIX)

    # -- locating ----------------------------------------------------------------

    def _symbol_index(self, manifest: Any = CURRENT) -> dict[str, list[str]]:
        """symbol -> frequencies holding it, from the manifest or one listing of each
        frequency directory."""
        m = self._resolve(manifest)
        if m is not None:
            return m.symbol_index()
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

    def _case_hint(self, symbol: str, frequencies: list[str], m: Manifest | None = None) -> str:
        """``; did you mean 'AAPL'?`` when ``symbol`` in upper (or lower) case is stored at one of
        ``frequencies`` (symbols are case-sensitive; import stores them upper case), else ""."""
        for other in dict.fromkeys((symbol.upper(), symbol.lower())):
            if other == symbol:
                continue
            for f in frequencies:
                if (other in m.files.get(f, ()) if m is not None
                        else os.path.exists(f"{self._prefix}{f}{os.sep}{other}{SUFFIX}")):
                    return f"; did you mean {other!r}? (symbols are case-sensitive)"
        return ""

    def _locate(
        self, symbol: str, frequency: str | None, index: dict[str, list[str]] | None = None,
        manifest: Any = CURRENT,
    ) -> tuple[str, str, os.stat_result]:
        """``(path, frequency, stat)`` of the symbol's file (in ``manifest``'s version)."""
        m = self._resolve(manifest)
        if m is not None:
            return self._locate_in(m, symbol, frequency)
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

    def _locate_in(
        self, m: Manifest, symbol: str, frequency: str | None
    ) -> tuple[str, str, os.stat_result]:
        root = str(self.root)
        if frequency is not None:
            freqs = [frequency]
        else:
            freqs = [f for f in sorted(m.files) if symbol in m.files[f]]
        found = [(f, p) for f in freqs if (p := m.path(root, f, symbol)) is not None]
        if not found:
            where = f" at frequency {frequency!r}" if frequency is not None else ""
            raise UnknownSymbolError(
                symbol,
                f"unknown symbol {symbol!r}{where} in store {self.root}"
                + self._case_hint(symbol, freqs if frequency else sorted(m.files), m),
            )
        if len(found) > 1:
            raise AmbiguousSymbolError(
                symbol,
                f"symbol {symbol!r} is stored at several frequencies {[f for f, _ in found]}; "
                "choose one with frequency=",
            )
        freq, path = found[0]
        try:
            return path, freq, os.stat(path)
        except FileNotFoundError:
            raise CorruptFileError(
                symbol,
                f"{symbol}: store version {m.version} names {path}, which is missing "
                "(removed by hand? run kronos store verify)",
            ) from None
