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
