"""Arrow K-line store: one Arrow IPC file per symbol and frequency, memory-mapped reads.

Layout (see ``docs/store.md``)::

    ROOT/<frequency>/<symbol>.arrow

Each file holds one record batch with the columns ``timestamps`` (``timestamp[ns]``,
naive local exchange wall clock), ``open, high, low, close, volume, amount``
(``float64``), sorted by unique timestamps. The symbol's metadata (frequency,
time zone, source, ...) is JSON under the schema metadata key ``kronos``.

The store has two sides: ``KlineReader`` (``store_reader.py``: symbols, metadata, reads,
the batch window read, the read snapshot's use) and ``KlineWriter`` (``store_writer.py``:
writes, appends, replaces, ``compact``, the per-symbol locks). The service holds a reader
only. ``KlineStore`` is both in one object, for the callers that write and then read the
same folder (import, the sample store, training data, tests): a reader that also writes,
nothing more. This module re-exports the store's classes, its errors, ``TIME_COLUMN`` and
``SNAPSHOT_NAME``; the file format's helpers are in ``fileformat.py``, the snapshot's in
``snapshot.py``.
"""

from __future__ import annotations

from kronos_core.data.errors import (  # noqa: F401  (re-exported: callers import them from here)
    ERROR_CODES,
    FREQUENCY_PATTERN,
    SYMBOL_PATTERN,
    AmbiguousSymbolError,
    CorruptFileError,
    InvalidSymbolError,
    NoDataError,
    StoreError,
    SymbolError,
    UnknownSymbolError,
    validate_frequency,
    validate_symbol,
)
from kronos_core.data.fileformat import TIME_COLUMN  # noqa: F401  (re-exported)
from kronos_core.data.snapshot import SNAPSHOT_NAME  # noqa: F401  (re-exported)
from kronos_core.data.store_dir import StoreDirectory  # noqa: F401  (re-exported)
from kronos_core.data.store_reader import KlineReader, SymbolWindow, WindowBatch  # noqa: F401
from kronos_core.data.store_writer import KlineWriter


class KlineStore(KlineReader, KlineWriter):
    """A store folder to read and write with one object: ``KlineReader`` (its constructor:
    ``root``, ``frequency``, ``cache_size``, ``snapshot``) plus ``KlineWriter``'s ``write`` and
    ``compact``. Its reads see its own writes (a changed file is re-opened)."""
