"""Per-symbol store errors and the checks on symbol and frequency names.

``StoreError`` subclasses carry a ``code`` (``ERROR_CODES``) that batch reads report per
symbol as ``SymbolError``; ``validate_symbol`` keeps symbols safe to use as file names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kronos_core.base.errors import ErrorCode

SYMBOL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FREQUENCY_PATTERN = re.compile(r"^[A-Za-z0-9]{1,16}$")

# the codes a store read can report (``StoreError`` subclasses below); see kronos_core.base.errors
ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_SYMBOL,
    ErrorCode.UNKNOWN_SYMBOL,
    ErrorCode.AMBIGUOUS_SYMBOL,
    ErrorCode.CORRUPT_FILE,
    ErrorCode.NO_DATA,
)


class StoreError(Exception):
    """A per-symbol store failure; ``code`` (set by each subclass) is one of ``ERROR_CODES``."""

    code: ErrorCode

    def __init__(self, symbol: str, message: str):
        super().__init__(message)
        self.symbol = symbol
        self.message = message

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.message

    def to_error(self) -> SymbolError:
        return SymbolError(self.symbol, self.code, self.message)


class InvalidSymbolError(StoreError, ValueError):
    code = ErrorCode.INVALID_SYMBOL


class UnknownSymbolError(StoreError, KeyError):
    code = ErrorCode.UNKNOWN_SYMBOL


class AmbiguousSymbolError(StoreError, LookupError):
    """The symbol is stored at several frequencies and none was chosen."""

    code = ErrorCode.AMBIGUOUS_SYMBOL


class CorruptFileError(StoreError):
    code = ErrorCode.CORRUPT_FILE


class NoDataError(StoreError):
    code = ErrorCode.NO_DATA


@dataclass(frozen=True)
class SymbolError:
    """One symbol's failure in a batch read. ``code``: one of ``ERROR_CODES``."""

    symbol: str
    code: ErrorCode
    message: str


def validate_symbol(symbol: Any) -> str:
    """Return ``symbol`` if it is safe to use as a file name, else raise ``InvalidSymbolError``.

    Allowed: 1-64 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or digit,
    and no ``..``. So no separators, no absolute paths, no empty names, no dot files.
    """
    if not isinstance(symbol, str):
        raise InvalidSymbolError(
            repr(symbol), f"symbol must be a string, got {type(symbol).__name__}"
        )
    if not SYMBOL_PATTERN.fullmatch(symbol) or ".." in symbol:
        raise InvalidSymbolError(
            symbol,
            f"invalid symbol {symbol!r}: use 1-64 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit, without '..'",
        )
    return symbol


def validate_frequency(frequency: Any) -> str:
    if not isinstance(frequency, str) or not FREQUENCY_PATTERN.fullmatch(frequency):
        raise ValueError(
            f"invalid frequency {frequency!r}: use 1-16 letters and digits, e.g. 5min, 1h, 1d"
        )
    return frequency

