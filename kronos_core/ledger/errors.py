"""The ledger's errors: one base class a caller catches to keep a forecast answered when
its recording fails."""

from __future__ import annotations


class LedgerError(Exception):
    """Something the ledger could not do (the message names the path and the cause)."""


class LedgerWriteError(LedgerError, OSError):
    """A record could not be written (unwritable folder, full disk, ...): the forecast itself
    is unaffected; the rows of that call are not in the ledger. An ``OSError`` too, so
    ``except OSError`` catches it; ``errno`` is the cause's."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(errno, message) if errno is not None else super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class StateError(LedgerError):
    """An adaptive calibration state file that cannot be read or does not match its calibration."""
