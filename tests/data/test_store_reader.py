"""Reading the Arrow K-line store (``KlineReader``): whole series, batch windows, as_of,
per-symbol errors, corrupt files, memory-mapped views, listing."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from data_helpers import COMMON_DAMAGE, FREQ, SYMBOLS, SYNTHETIC_CN, clean_candles, lengths, series

from kronos_core.base.candles import FEATURES
from kronos_core.data import fileformat
from kronos_core.data import store as store_mod
from kronos_core.data.fileformat import write_arrow_atomic
from kronos_core.data.store import AmbiguousSymbolError, KlineStore, UnknownSymbolError
from kronos_core.data.store_reader import KlineReader


def test_full_read_equals_csv(real_store, store_frames):
    for name, sym in SYMBOLS.items():
        df = store_frames[name]
        got = real_store.read(sym)
        np.testing.assert_array_equal(got["close"].to_numpy(), df["close"].to_numpy(dtype=float))
        np.testing.assert_array_equal(got["volume"].to_numpy(), df["volume"].to_numpy(dtype=float))
        assert (got["timestamps"].to_numpy() == pd.to_datetime(df["timestamps"]).to_numpy()).all()
    # amount follows the model's rule where the file has none
    goog = real_store.read("GOOG")
    mean_price = goog[["open", "high", "low", "close"]].mean(axis=1)
    np.testing.assert_allclose(goog["amount"], goog["volume"] * mean_price)


def test_read_windows_tail_and_order(real_store, store_frames):
    batch = real_store.read_windows(["GOOG", "SYNCN", "EURUSD"], lookback=600)
    assert batch.symbols == ["GOOG", "SYNCN", "EURUSD"] and len(batch) == 3
    for w in batch.windows:
        assert w.values.shape == (600, 6) and w.values.dtype == np.float32
        assert w.timestamps.dtype == np.dtype("datetime64[ns]")
    assert lengths(batch) == [600, 600, 600]
    assert batch.errors == []
    for i, name in enumerate(["goog_daily.csv", SYNTHETIC_CN, "eurusd_hourly.csv"]):
        df = store_frames[name].tail(600)
        values, stamps = series(batch, i)
        np.testing.assert_array_equal(values[:, 3], df["close"].to_numpy(dtype=np.float32))
        assert (stamps == pd.DatetimeIndex(pd.to_datetime(df["timestamps"]))).all()


def test_shorter_history_is_shorter_not_invented(tmp_path, real_frames):
    st = KlineStore(tmp_path)
    full = clean_candles(real_frames["goog_daily.csv"])
    st.write("LONG", full, frequency="1d")
    st.write("SHORT", full.tail(100), frequency="1d")
    batch = st.read_windows(["SHORT", "LONG"], lookback=300)
    assert lengths(batch) == [100, 300]
    values, stamps = series(batch, 0)
    assert len(values) == len(stamps) == 100
    np.testing.assert_array_equal(values[:, 0], full["open"].tail(100).to_numpy(dtype=np.float32))
    # no padding: the short window holds its 100 candles only, never an invented one
    short = batch.windows[0]
    assert short.values.shape == (100, 6) and not np.isnat(short.timestamps).any()


def test_as_of_naive_and_aware(real_store, store_frames):
    df = store_frames[SYNTHETIC_CN]
    ts = pd.to_datetime(df["timestamps"])
    as_of = "2024-07-15 13:02:00"  # inside the lunch break: last candle is 11:30
    batch = real_store.read_windows(["SYNCN"], lookback=50, as_of=as_of)
    expected = df[ts <= pd.Timestamp(as_of)].tail(50)
    values, stamps = series(batch, 0)
    assert stamps[-1] == pd.Timestamp("2024-07-15 11:30")
    # the window was cut by as_of; its last stored candle is still the file's last
    assert batch.windows[0].last_stored == pd.Timestamp(real_store.metadata("SYNCN")["last"])
    np.testing.assert_array_equal(values[:, 3], expected["close"].to_numpy(dtype=np.float32))
    # an aware as_of is converted to the symbol's zone: EURUSD is UTC
    aware = pd.Timestamp("2017-06-01 12:00", tz="Europe/Berlin")  # 10:00 UTC
    b2 = real_store.read_windows(["EURUSD"], lookback=3, as_of=aware)
    assert series(b2, 0)[1][-1] == pd.Timestamp("2017-06-01 10:00")


def test_errors_per_symbol_others_still_come_back(real_store):
    batch = real_store.read_windows(
        ["GOOG", "NOPE", "../etc/passwd", "SYNCN", "EURUSD"], lookback=10, as_of="2018-01-01"
    )
    assert batch.symbols == ["GOOG", "EURUSD"]  # SYNCN (2024) has nothing before 2018
    codes = {e.symbol: e.code for e in batch.errors}
    assert codes == {
        "NOPE": "unknown_symbol",
        "../etc/passwd": "invalid_symbol",
        "SYNCN": "no_data",
    }
    assert all(e.message for e in batch.errors)
    assert [w.values.shape for w in batch.windows] == [(10, 6), (10, 6)]


def test_non_string_symbol_and_bad_frequency(tmp_path):
    st = KlineStore(tmp_path)
    assert st.read_windows([None, 3], 5).errors[0].code == "invalid_symbol"
    with pytest.raises(ValueError):
        st.path("GOOG", "../1d")
    with pytest.raises(ValueError):
        st.read_windows(["GOOG"], 0)
    with pytest.raises(TypeError):
        st.read_windows("GOOG", 5)


def _copy_with(tmp_path, real_store, sym, mutate):
    src = real_store.root / FREQ[sym] / f"{sym}.arrow"
    data = src.read_bytes()
    src.write_bytes(mutate(data))


@pytest.mark.parametrize(
    "mutate,what",
    [
        *COMMON_DAMAGE,
        (lambda b: b[:-74] + b"\xff" * 64 + b[-10:], "footer overwritten"),
    ],
)
def test_corrupt_or_truncated_file_is_that_symbols_error(tmp_path, real_store, mutate, what):
    _copy_with(tmp_path, real_store, "EURUSD", mutate)
    fresh = KlineReader(real_store.root)
    batch = fresh.read_windows(["GOOG", "EURUSD", "SYNCN"], lookback=20)
    assert batch.symbols == ["GOOG", "SYNCN"], what
    assert [(e.symbol, e.code) for e in batch.errors] == [("EURUSD", "corrupt_file")], what
    with pytest.raises(store_mod.CorruptFileError):
        fresh.metadata("EURUSD")


def test_wrong_schema_unsorted_and_bad_metadata_are_corrupt(tmp_path):
    st = KlineStore(tmp_path)
    (tmp_path / "1d").mkdir()
    ts = pd.date_range("2024-01-01", periods=5).as_unit("ns").asi8
    vals = np.ones((5, 6))
    # other columns
    t = pa.table({"time": pa.array(ts.view("datetime64[ns]")), "price": pa.array(np.ones(5))})
    write_arrow_atomic(tmp_path / "1d" / "WRONG.arrow", t)
    # unsorted timestamps written behind the store's back
    write_arrow_atomic(
        tmp_path / "1d" / "UNSORTED.arrow", fileformat.to_table(ts[::-1].copy(), vals, {})
    )
    # metadata that is not JSON
    bad = fileformat.to_table(ts, vals, {}).replace_schema_metadata({b"kronos": b"{not json"})
    write_arrow_atomic(tmp_path / "1d" / "BADMETA.arrow", bad)
    st.write(
        "OK",
        pd.DataFrame({"timestamps": ts.view("datetime64[ns]"), **dict(zip(FEATURES, vals.T))}),
        frequency="1d",
    )
    batch = st.read_windows(["WRONG", "UNSORTED", "BADMETA", "OK"], lookback=5)
    assert batch.symbols == ["OK"]
    assert {e.symbol: e.code for e in batch.errors} == {
        "WRONG": "corrupt_file",
        "UNSORTED": "corrupt_file",
        "BADMETA": "corrupt_file",
    }


def test_reads_are_memory_mapped_views(real_store):
    entry = real_store._entry("SYNCN", None)
    # the columns are views into the mapping, not copies of the file
    for arr in [entry.ts, *entry.cols]:
        assert not arr.flags.owndata and not arr.flags.writeable
    assert entry.block is not None and np.array_equal(entry.block, np.stack(entry.cols))


def test_leftover_temp_files_are_invisible(tmp_path, real_frames):
    st = KlineStore(tmp_path, frequency="1d")
    st.write("G", clean_candles(real_frames["goog_daily.csv"]).iloc[:50])
    # what a crash between write and rename leaves behind
    (tmp_path / "1d" / ".G.arrow.999.abcd.tmp").write_bytes(b"half a file")
    assert st.symbols() == ["G"]
    assert lengths(st.read_windows(["G"], 10)) == [10]


def test_symbol_at_several_frequencies(tmp_path, real_frames):
    st = KlineStore(tmp_path)
    frame = clean_candles(real_frames["goog_daily.csv"]).iloc[:40]
    st.write("X", frame, frequency="1d")
    st.write("X", frame.iloc[::5], frequency="1w")  # (daily bars as 1w are refused)
    assert st.symbols() == ["X"] and st.symbols("1w") == ["X"]
    batch = st.read_windows(["X"], 5)
    assert batch.errors[0].code == "ambiguous_symbol" and "1d" in batch.errors[0].message
    with pytest.raises(AmbiguousSymbolError):
        st.metadata("X")
    assert lengths(st.read_windows(["X"], 5, frequency="1w")) == [5]
    assert KlineStore(tmp_path, frequency="1d").read_windows(["X"], 5).symbols == ["X"]
    with pytest.raises(UnknownSymbolError):
        st.metadata("Y")


def test_preload_and_many_symbols_listing(tmp_path, real_frames):
    frame = clean_candles(real_frames["goog_daily.csv"]).iloc[:30]
    st = KlineStore(tmp_path, frequency="1d")
    names = [f"S{i:03d}" for i in range(40)]
    for n in names:
        st.write(n, frame, fsync=False)
    fresh = KlineReader(tmp_path)
    assert fresh.preload() == []
    batch = fresh.read_windows(names + ["MISSING"], 7)  # >= 16 symbols: one directory listing
    assert batch.symbols == names and batch.errors[0].code == "unknown_symbol"
    assert os.path.exists(tmp_path / "1d" / "S000.arrow")
