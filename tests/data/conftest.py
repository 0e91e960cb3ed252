"""Fixtures for the data tests: the real candle files (the copies bundled in kronos_core/data/real)."""

from __future__ import annotations

import pandas as pd
import pytest
from data_helpers import REAL_FILES, SYMBOLS, clean_candles, real_path


@pytest.fixture(scope="session")
def real_frames() -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(real_path(name)) for name in REAL_FILES}


@pytest.fixture(scope="session")
def real_stamps(real_frames) -> dict[str, pd.DatetimeIndex]:
    return {
        k: pd.DatetimeIndex(pd.to_datetime(v["timestamps"])).as_unit("ns")
        for k, v in real_frames.items()
    }


@pytest.fixture()
def real_store(tmp_path, real_frames):
    """A store of the three real files (GOOG 1d, EURUSD 1h in UTC, ASHARE 5min)."""
    from kronos_core.data.store import KlineStore

    st = KlineStore(tmp_path / "store")
    for name, sym in SYMBOLS.items():
        st.write(
            sym, clean_candles(real_frames[name]), timezone="UTC" if sym == "EURUSD" else None, source=name
        )
    return st
