"""Candle data: the Arrow K-line store, CSV/Parquet import, session-aware future
timestamps and the sample store. See ``docs/store.md``.

Submodules are imported on use so ``import kronos_core.data`` stays light.
"""

from __future__ import annotations

__all__ = [
    "KlineStore",
    "KlineReader",
    "KlineWriter",
    "WindowBatch",
    "SymbolWindow",
    "SymbolError",
    "future_timestamps",
    "build_sample_store",
    "default_sample_store",
]


def __getattr__(name: str):
    if name in (
        "KlineStore", "KlineReader", "KlineWriter", "WindowBatch", "SymbolWindow", "SymbolError",
    ):
        from kronos_core.data import store

        return getattr(store, name)
    if name == "future_timestamps":
        from kronos_core.data.timestamps import future_timestamps

        return future_timestamps
    if name in ("build_sample_store", "default_sample_store"):
        from kronos_core.data import sample_store

        return getattr(sample_store, name)
    raise AttributeError(f"module 'kronos_core.data' has no attribute {name!r}")
