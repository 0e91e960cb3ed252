"""Helpers shared by the data tests: where the real candle files are."""

from __future__ import annotations

from pathlib import Path

from kronos_core.data.sample_store import REAL_DIR

# the real files bundled in kronos_core/data/real (the A-share 5-minute file stays in the shared
# folder: the ``a_share_stamps`` fixture reads it there, or skips)
REAL_FILES = ("goog_daily.csv", "eurusd_hourly.csv", "sp500_daily.csv")
GOOG, EURUSD, SPX = REAL_FILES
# one synthetic Shanghai-style 5-minute series (the sample store's generator): the store tests'
# intraday series with a lunch break (``synthetic_cn_5min`` fixture)
SYNTHETIC_CN = "synthetic_cn_5min"
# spot FX: stamps in UTC, sessions on the New York clock
FX_CLOCK = dict(timezone="UTC", session_timezone="America/New_York")


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


# the series in the store tests' ``real_store`` (tests/data/conftest.py, ``store_frames``): symbol,
# frequency
SYMBOLS = {
    SYNTHETIC_CN: "SYNCN",
    "goog_daily.csv": "GOOG",
    "eurusd_hourly.csv": "EURUSD",
}
FREQ = {"SYNCN": "5min", "GOOG": "1d", "EURUSD": "1h"}


def clean_candles(df):
    """``df`` validated (``validate_candles``): what a store write takes."""
    from kronos_core.data.validate import validate_candles

    frame, _, _ = validate_candles(df)
    return frame
