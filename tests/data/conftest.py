"""Fixtures for the data tests: the real candle files (the copies bundled in kronos_core/data/real),
the A-share file of the shared folder, and one synthetic Shanghai-style 5-minute series."""

from __future__ import annotations

import pandas as pd
import pytest
from data_helpers import REAL_FILES, SYMBOLS, SYNTHETIC_CN, clean_candles, real_path
from fixture_paths import SHARED_A_SHARE, SHARED_MSFT, shared_path


@pytest.fixture(scope="session")
def real_frames() -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(real_path(name)) for name in REAL_FILES}


@pytest.fixture(scope="session")
def real_stamps(real_frames) -> dict[str, pd.DatetimeIndex]:
    return {
        k: pd.DatetimeIndex(pd.to_datetime(v["timestamps"])).as_unit("ns")
        for k, v in real_frames.items()
    }


def _stamps(path) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(pd.read_csv(path)["timestamps"])).as_unit("ns")


@pytest.fixture(scope="session")
def a_share_stamps() -> pd.DatetimeIndex:
    """The real Shanghai A-share 5-minute stamps (2,500, 2024-06-18 to 08-29, stamped at the
    candle's close, lunch break 11:30-13:00) of the shared folder; skips when it is absent."""
    return _stamps(shared_path(SHARED_A_SHARE))


@pytest.fixture(scope="session")
def msft_1min() -> pd.DatetimeIndex:
    """Real US 1-minute stamps of the shared folder (MSFT): six NYSE sessions around a weekend,
    09:30 to 16:00 with the closing print, 391 bars a day; skips when it is absent."""
    return _stamps(shared_path(SHARED_MSFT))


@pytest.fixture(scope="session")
def synthetic_cn_5min(tmp_path_factory) -> pd.DataFrame:
    """2,500 candles of one synthetic symbol of the sample store (seed 0: its Shanghai-style
    calendar, 09:35-11:30 and 13:05-15:00 stamped at the close, weekdays, ending 2024-08-30,
    with amount), read back from the Arrow store as a CSV file would read."""
    from kronos_core.data.sample_store import build_sample_store
    from kronos_core.data.store import KlineStore

    root = build_sample_store(tmp_path_factory.mktemp("synthetic"), n_symbols=1, n_candles=2500,
                              include_real=False)
    store = KlineStore(root)
    assert store.metadata("SYN0000")["market"] == "CN"
    frame = store.read("SYN0000")
    return frame.assign(timestamps=frame["timestamps"].dt.strftime("%Y-%m-%d %H:%M:%S"))


@pytest.fixture(scope="session")
def store_frames(real_frames, synthetic_cn_5min) -> dict[str, pd.DataFrame]:
    """The frames of ``SYMBOLS``, by name."""
    return {**real_frames, SYNTHETIC_CN: synthetic_cn_5min}


@pytest.fixture()
def real_store(tmp_path, store_frames):
    """A store of GOOG 1d, EURUSD 1h in UTC (real) and SYNCN 5min (synthetic, Shanghai-style)."""
    from kronos_core.data.store import KlineStore

    st = KlineStore(tmp_path / "store")
    for name, sym in SYMBOLS.items():
        st.write(
            sym, clean_candles(store_frames[name]), timezone="UTC" if sym == "EURUSD" else None,
            source=name,
        )
    return st
