"""The Arrow K-line store as one object (``KlineStore``: a reader that also writes): the
layout its writes make and its reads find, symbol safety on both sides, and what each side
offers."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from data_helpers import clean_candles

from kronos_core.base.candles import FEATURES
from kronos_core.data.store import InvalidSymbolError, KlineStore, validate_symbol
from kronos_core.data.store_reader import KlineReader
from kronos_core.data.store_writer import KlineWriter


def test_layout_and_metadata(real_store, real_frames):
    root = real_store.root
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.arrow")) == [
        "1d/GOOG.arrow",
        "1h/EURUSD.arrow",
        "5min/SYNCN.arrow",
    ]
    assert real_store.symbols() == ["EURUSD", "GOOG", "SYNCN"]
    assert real_store.frequencies() == ["1d", "1h", "5min"]
    meta = real_store.metadata("EURUSD")
    assert (
        meta["frequency"] == "1h"
        and meta["timezone"] == "UTC"
        and meta["source"] == "eurusd_hourly.csv"
    )
    assert meta["rows"] == len(real_frames["eurusd_hourly.csv"])
    assert meta["first"] == "2017-04-19 09:00:00" and meta["last"] == "2018-02-07 15:00:00"
    # the metadata lives in the Arrow schema, the columns are the documented ones
    with pa.memory_map(str(root / "1h" / "EURUSD.arrow")) as src:
        schema = ipc.open_file(src).schema
    assert schema.names == ["timestamps", *FEATURES]
    assert json.loads(schema.metadata[b"kronos"])["timezone"] == "UTC"


@pytest.mark.parametrize(
    "bad",
    [
        "../x",
        "..",
        "../../etc/passwd",
        "/etc/passwd",
        "/abs",
        "a/b",
        "a\\b",
        "",
        ".hidden",
        "x" * 65,
        "a..b",
        "with space",
        "nul\x00",
        "-lead",
        "é",
    ],
)
def test_unsafe_symbols_rejected(tmp_path, real_frames, bad):
    st = KlineStore(tmp_path / "store")
    st.write("GOOG", clean_candles(real_frames["goog_daily.csv"]).tail(5))
    with pytest.raises(InvalidSymbolError):
        validate_symbol(bad)
    with pytest.raises(InvalidSymbolError):
        st.path(bad, "1d")
    with pytest.raises(InvalidSymbolError):
        st.metadata(bad)
    with pytest.raises(InvalidSymbolError):
        st.write(bad, clean_candles(real_frames["goog_daily.csv"]).tail(5), frequency="1d")
    batch = st.read_windows([bad, "GOOG"], lookback=5)
    assert [e.code for e in batch.errors] == ["invalid_symbol"] and batch.symbols == ["GOOG"]
    # nothing was created anywhere but the store's own file
    assert sorted(
        p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".lock")
    ) == ["GOOG.arrow"]


def test_the_store_is_a_reader_and_a_writer(tmp_path, real_frames):
    """The service holds a ``KlineReader``: it has no way to write. A ``KlineWriter``'s files
    are read by a separate reader."""
    assert not hasattr(KlineReader, "write") and not hasattr(KlineReader, "compact")
    assert not hasattr(KlineWriter, "read_windows") and not hasattr(KlineWriter, "metadata")
    assert issubclass(KlineStore, KlineReader) and issubclass(KlineStore, KlineWriter)
    frame = clean_candles(real_frames["goog_daily.csv"]).tail(30)
    KlineWriter(tmp_path, frequency="1d").write("GOOG", frame, fsync=False)
    reader = KlineReader(tmp_path)
    assert (
        reader.symbols() == ["GOOG"]
        and len(reader.read_windows(["GOOG"], 10).windows[0].values) == 10
    )
    assert repr(reader) == f"KlineReader({str(tmp_path)!r}, frequency=None)"
