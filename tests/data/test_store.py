"""The Arrow K-line store: layout, reads, appends, atomic writes, symbol safety, corrupt files."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from data_helpers import COMMON_DAMAGE, lengths, series

from kronos_core.candles import FEATURES, CandleError
from kronos_core.data import fileformat
from kronos_core.data import store as store_mod
from kronos_core.data.store import (
    AmbiguousSymbolError,
    InvalidSymbolError,
    KlineStore,
    UnknownSymbolError,
    validate_symbol,
)
from kronos_core.data.validate import validate_candles

SYMBOLS = {
    "kline_5min_a_share.csv": "ASHARE",
    "goog_daily.csv": "GOOG",
    "eurusd_hourly.csv": "EURUSD",
}
FREQ = {"ASHARE": "5min", "GOOG": "1d", "EURUSD": "1h"}


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    frame, _, _ = validate_candles(df)
    return frame


@pytest.fixture()
def real_store(tmp_path, real_frames):
    st = KlineStore(tmp_path / "store")
    for name, sym in SYMBOLS.items():
        st.write(
            sym, _clean(real_frames[name]), timezone="UTC" if sym == "EURUSD" else None, source=name
        )
    return st


def test_layout_and_metadata(real_store, real_frames):
    root = real_store.root
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.arrow")) == [
        "1d/GOOG.arrow",
        "1h/EURUSD.arrow",
        "5min/ASHARE.arrow",
    ]
    assert real_store.symbols() == ["ASHARE", "EURUSD", "GOOG"]
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


def test_full_read_equals_csv(real_store, real_frames):
    for name, sym in SYMBOLS.items():
        df = real_frames[name]
        got = real_store.read(sym)
        np.testing.assert_array_equal(got["close"].to_numpy(), df["close"].to_numpy(dtype=float))
        np.testing.assert_array_equal(got["volume"].to_numpy(), df["volume"].to_numpy(dtype=float))
        assert (got["timestamps"].to_numpy() == pd.to_datetime(df["timestamps"]).to_numpy()).all()
    # amount follows the model's rule where the file has none
    goog = real_store.read("GOOG")
    mean_price = goog[["open", "high", "low", "close"]].mean(axis=1)
    np.testing.assert_allclose(goog["amount"], goog["volume"] * mean_price)


def test_read_windows_tail_and_order(real_store, real_frames):
    batch = real_store.read_windows(["GOOG", "ASHARE", "EURUSD"], lookback=600)
    assert batch.symbols == ["GOOG", "ASHARE", "EURUSD"] and len(batch) == 3
    for w in batch.windows:
        assert w.values.shape == (600, 6) and w.values.dtype == np.float32
        assert w.timestamps.dtype == np.dtype("datetime64[ns]")
    assert lengths(batch) == [600, 600, 600]
    assert batch.errors == []
    for i, name in enumerate(["goog_daily.csv", "kline_5min_a_share.csv", "eurusd_hourly.csv"]):
        df = real_frames[name].tail(600)
        values, stamps = series(batch, i)
        np.testing.assert_array_equal(values[:, 3], df["close"].to_numpy(dtype=np.float32))
        assert (stamps == pd.DatetimeIndex(pd.to_datetime(df["timestamps"]))).all()


def test_shorter_history_is_shorter_not_invented(tmp_path, real_frames):
    st = KlineStore(tmp_path)
    full = _clean(real_frames["goog_daily.csv"])
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


def test_as_of_naive_and_aware(real_store, real_frames):
    df = real_frames["kline_5min_a_share.csv"]
    ts = pd.to_datetime(df["timestamps"])
    as_of = "2024-07-15 13:02:00"  # inside the lunch break: last candle is 11:30
    batch = real_store.read_windows(["ASHARE"], lookback=50, as_of=as_of)
    expected = df[ts <= pd.Timestamp(as_of)].tail(50)
    values, stamps = series(batch, 0)
    assert stamps[-1] == pd.Timestamp("2024-07-15 11:30")
    # the window was cut by as_of; its last stored candle is still the file's last
    assert batch.windows[0].last_stored == pd.Timestamp(real_store.metadata("ASHARE")["last"])
    np.testing.assert_array_equal(values[:, 3], expected["close"].to_numpy(dtype=np.float32))
    # an aware as_of is converted to the symbol's zone: EURUSD is UTC
    aware = pd.Timestamp("2017-06-01 12:00", tz="Europe/Berlin")  # 10:00 UTC
    b2 = real_store.read_windows(["EURUSD"], lookback=3, as_of=aware)
    assert series(b2, 0)[1][-1] == pd.Timestamp("2017-06-01 10:00")


def test_errors_per_symbol_others_still_come_back(real_store):
    batch = real_store.read_windows(
        ["GOOG", "NOPE", "../etc/passwd", "ASHARE", "EURUSD"], lookback=10, as_of="2018-01-01"
    )
    assert batch.symbols == ["GOOG", "EURUSD"]  # ASHARE has nothing before 2018
    codes = {e.symbol: e.code for e in batch.errors}
    assert codes == {
        "NOPE": "unknown_symbol",
        "../etc/passwd": "invalid_symbol",
        "ASHARE": "no_data",
    }
    assert all(e.message for e in batch.errors)
    assert [w.values.shape for w in batch.windows] == [(10, 6), (10, 6)]


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
    st.write("GOOG", _clean(real_frames["goog_daily.csv"]).tail(5))
    with pytest.raises(InvalidSymbolError):
        validate_symbol(bad)
    with pytest.raises(InvalidSymbolError):
        st.path(bad, "1d")
    with pytest.raises(InvalidSymbolError):
        st.metadata(bad)
    with pytest.raises(InvalidSymbolError):
        st.write(bad, _clean(real_frames["goog_daily.csv"]).tail(5), frequency="1d")
    batch = st.read_windows([bad, "GOOG"], lookback=5)
    assert [e.code for e in batch.errors] == ["invalid_symbol"] and batch.symbols == ["GOOG"]
    # nothing was created anywhere but the store's own file
    assert sorted(
        p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".lock")
    ) == ["GOOG.arrow"]


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
    fresh = KlineStore(real_store.root)
    batch = fresh.read_windows(["GOOG", "EURUSD", "ASHARE"], lookback=20)
    assert batch.symbols == ["GOOG", "ASHARE"], what
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
    store_mod.write_arrow_atomic(tmp_path / "1d" / "WRONG.arrow", t)
    # unsorted timestamps written behind the store's back
    store_mod.write_arrow_atomic(
        tmp_path / "1d" / "UNSORTED.arrow", fileformat.to_table(ts[::-1].copy(), vals, {})
    )
    # metadata that is not JSON
    bad = fileformat.to_table(ts, vals, {}).replace_schema_metadata({b"kronos": b"{not json"})
    store_mod.write_arrow_atomic(tmp_path / "1d" / "BADMETA.arrow", bad)
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
    entry = real_store._entry("ASHARE", None)
    # the columns are views into the mapping, not copies of the file
    for arr in [entry.ts, *entry.cols]:
        assert not arr.flags.owndata and not arr.flags.writeable
    assert entry.block is not None and np.array_equal(entry.block, np.stack(entry.cols))


def test_append_keeps_history_and_cached_readers_see_it(tmp_path, real_frames):
    full = _clean(real_frames["kline_5min_a_share.csv"])
    st = KlineStore(tmp_path, frequency="5min")
    st.write("A", full.iloc[:1500])
    first = st.read_windows(["A"], lookback=10)
    assert series(first, 0)[1][-1] == full["timestamps"].iloc[1499]
    st.write("A", full.iloc[1400:])  # overlaps 100 identical candles
    after = st.read_windows(
        ["A"], lookback=2500
    )  # same instance: cache invalidated by the new file
    assert lengths(after) == [2500]
    np.testing.assert_array_equal(
        series(after, 0)[0][:, 3], full["close"].to_numpy(dtype=np.float32)
    )
    assert st.metadata("A")["rows"] == 2500
    # the view obtained before the append is still valid (old mapping kept alive)
    assert series(first, 0)[1][-1] == full["timestamps"].iloc[1499]


def test_overlap_policies(tmp_path, real_frames):
    full = _clean(real_frames["goog_daily.csv"])
    st = KlineStore(tmp_path, frequency="1d")
    st.write("G", full.iloc[:100])
    changed = full.iloc[90:110].copy()
    changed["close"] += 1.0
    with pytest.raises(CandleError, match="10 new candle"):
        st.write("G", changed)
    assert st.metadata("G")["rows"] == 100  # refused: unchanged
    st.write("G", changed, on_overlap="keep")
    got = st.read("G")
    assert len(got) == 110
    np.testing.assert_array_equal(got["close"].iloc[90:100], full["close"].iloc[90:100])
    np.testing.assert_array_equal(got["close"].iloc[100:110], changed["close"].iloc[10:])
    st.write("G", changed, on_overlap="replace")
    np.testing.assert_array_equal(st.read("G")["close"].iloc[90:110], changed["close"])
    # backfill of older candles merges in by time
    st.write("G", full.iloc[200:210])
    st.write("G", full.iloc[150:160])
    assert st.read("G")["timestamps"].is_monotonic_increasing and st.metadata("G")["rows"] == 130


def test_write_is_atomic_when_interrupted(tmp_path, real_frames, monkeypatch):
    full = _clean(real_frames["goog_daily.csv"])
    st = KlineStore(tmp_path, frequency="1d")
    st.write("G", full.iloc[:100])
    before = (tmp_path / "1d" / "G.arrow").read_bytes()

    real_new_file = ipc.new_file

    class Crash(RuntimeError):
        pass

    def crashing_new_file(sink, schema, **kw):
        writer = real_new_file(sink, schema, **kw)
        orig = writer.write_batch

        def write_batch(batch):
            orig(batch.slice(0, 10))  # some bytes reach the temporary file...
            raise Crash("power cut")  # ...then the process "dies"

        writer.write_batch = write_batch
        return writer

    monkeypatch.setattr(fileformat.ipc, "new_file", crashing_new_file)
    with pytest.raises(Crash):
        st.write("G", full.iloc[100:200])
    monkeypatch.undo()
    assert (tmp_path / "1d" / "G.arrow").read_bytes() == before
    assert [p.name for p in (tmp_path / "1d").iterdir() if p.name.endswith(".tmp")] == []
    assert KlineStore(tmp_path).metadata("G")["rows"] == 100


def test_leftover_temp_files_are_invisible(tmp_path, real_frames):
    st = KlineStore(tmp_path, frequency="1d")
    st.write("G", _clean(real_frames["goog_daily.csv"]).iloc[:50])
    # what a crash between write and rename leaves behind
    (tmp_path / "1d" / ".G.arrow.999.abcd.tmp").write_bytes(b"half a file")
    assert st.symbols() == ["G"]
    assert lengths(st.read_windows(["G"], 10)) == [10]


def test_concurrent_reader_sees_old_or_new_never_partial(tmp_path, real_frames):
    """A reader in another process keeps reading while this one replaces the file."""
    import subprocess
    import sys
    import textwrap
    import time

    full = _clean(real_frames["sp500_daily.csv"])
    st = KlineStore(tmp_path, frequency="1d")
    st.write("S", full.iloc[:1000])
    code = textwrap.dedent(
        f"""
        import time
        import pandas as pd
        from kronos_core.data.store import KlineStore
        st = KlineStore({str(tmp_path)!r}, frequency="1d")
        seen = set()
        end = time.time() + 300  # gives up only if the writer never gets going
        while time.time() < end and len(seen) < 3:
            b = st.read_windows(["S"], 6000)  # cached reader, re-opened when the file changes
            assert not b.errors, b.errors
            v, ts = b.windows[0].values, pd.DatetimeIndex(b.windows[0].timestamps)
            assert ts.is_monotonic_increasing and len(ts) == len(v)
            seen.add(len(v))
        print(sorted(seen))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sizes = list(range(1000, 5100, 500))
    k = 0
    deadline = time.time() + 360
    while proc.poll() is None and time.time() < deadline:
        st.write("S", full.iloc[: sizes[k % len(sizes)]], overwrite=True, fsync=False)
        k += 1
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert len(seen) >= 3  # it did read while the file was being replaced (3 versions seen)
    assert set(seen) <= set(sizes)  # and only ever whole versions


def test_symbol_at_several_frequencies(tmp_path, real_frames):
    st = KlineStore(tmp_path)
    frame = _clean(real_frames["goog_daily.csv"]).iloc[:20]
    st.write("X", frame, frequency="1d")
    st.write("X", frame, frequency="1w")
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
    frame = _clean(real_frames["goog_daily.csv"]).iloc[:30]
    st = KlineStore(tmp_path, frequency="1d")
    names = [f"S{i:03d}" for i in range(40)]
    for n in names:
        st.write(n, frame, fsync=False)
    fresh = KlineStore(tmp_path)
    assert fresh.preload() == []
    batch = fresh.read_windows(names + ["MISSING"], 7)  # >= 16 symbols: one directory listing
    assert batch.symbols == names and batch.errors[0].code == "unknown_symbol"
    assert os.path.exists(tmp_path / "1d" / "S000.arrow")
