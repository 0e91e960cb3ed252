"""The ledger's errors: one base class a caller catches to keep a forecast answered when
its recording fails."""

from __future__ import annotations


class LedgerError(Exception):
    """Something the ledger could not do (the message names the path and the cause)."""


class LedgerWriteError(LedgerError):
    """A record could not be written (unwritable folder, full disk, ...): the forecast itself
    is unaffected; the rows of that call are not in the ledger."""


class StateError(LedgerError):
    """An adaptive calibration state file that cannot be read or does not match its calibration."""
