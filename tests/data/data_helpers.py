"""Helpers shared by the data tests: where the real candle files are."""

from __future__ import annotations

from pathlib import Path

from kronos_core.data.sample_store import REAL_DIR

REAL_FILES = ("kline_5min_a_share.csv", "goog_daily.csv", "eurusd_hourly.csv", "sp500_daily.csv")


def real_path(name: str) -> Path:
    """The bundled copy inside the repository (``kronos_core/data/real/``)."""
    return REAL_DIR / name


# Ways to damage an Arrow file that every reader must survive (tests add their own).
COMMON_DAMAGE = [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:-7], "footer cut"),
    (lambda b: b"", "empty"),
    (lambda b: b"not an arrow file" * 10, "garbage"),
    (lambda b: b[:-10] + b"\x00" * 10, "trailer zeroed"),
]


def lengths(batch) -> list[int]:
    """The window length of each symbol of a ``WindowBatch``, in its order."""
    return [len(w.values) for w in batch.windows]


def series(batch, i: int):
    """``(values (L_i, 6), DatetimeIndex (L_i,))`` of the i-th window of a ``WindowBatch``."""
    import pandas as pd

    w = batch.windows[i]
    return w.values, pd.DatetimeIndex(w.timestamps)


def metadata(batch) -> list[dict]:
    """The metadata of each window of a ``WindowBatch``, in its order."""
    return [w.metadata for w in batch.windows]
