"""The read snapshot (``_snapshot.arrow``): used when fresh, per-symbol files stay the truth."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from data_helpers import COMMON_DAMAGE, SYNTHETIC_CN, lengths, metadata, series

from kronos_core.base.candles import FEATURES
from kronos_core.cli import main
from kronos_core.data import fileformat
from kronos_core.data import sample_store as ss
from kronos_core.data import snapshot as snapshot_mod
from kronos_core.data import store as store_mod
from kronos_core.data.importer import import_files
from kronos_core.data.store import SNAPSHOT_NAME, KlineStore, WindowBatch
from kronos_core.data.validate import validate_candles

REAL = {  # file -> (symbol, frequency, timezone); SYNCN: a synthetic Shanghai-style 5-min series
    SYNTHETIC_CN: ("SYNCN", "5min", "Asia/Shanghai"),
    "goog_daily.csv": ("GOOG", "1d", "America/New_York"),
    "sp500_daily.csv": ("SPX", "1d", "America/New_York"),
    "eurusd_hourly.csv": ("EURUSD", "1h", "UTC"),
}
ALL = ["SYNCN", "GOOG", "SPX", "EURUSD"] + [f"G{i:02d}" for i in range(20)]


def _clean(df):
    return validate_candles(df)[0]


@pytest.fixture()
def store(tmp_path, store_frames):
    """The bundled real series and the synthetic 5-minute one, plus 20 daily slices of GOOG,
    compacted."""
    st = KlineStore(tmp_path / "store")
    for name, (sym, freq, tz) in REAL.items():
        st.write(sym, _clean(store_frames[name]), frequency=freq, timezone=tz, fsync=False)
    goog = _clean(store_frames["goog_daily.csv"])
    for i in range(20):
        st.write(f"G{i:02d}", goog.iloc[i * 50 : i * 50 + 300 + i], frequency="1d", fsync=False)
    report = st.compact(fsync=False)
    assert {f: r["symbols"] for f, r in report.items()} == {"1d": 22, "1h": 1, "5min": 1}
    return st


def _same(a: WindowBatch, b: WindowBatch) -> None:
    assert a.symbols == b.symbols
    assert [(e.symbol, e.code) for e in a.errors] == [(e.symbol, e.code) for e in b.errors]
    for x, y in zip(a.windows, b.windows, strict=True):
        np.testing.assert_array_equal(x.values, y.values)
        np.testing.assert_array_equal(x.timestamps, y.timestamps)
        assert len(x.values) == len(y.values)
        assert x.metadata == y.metadata and x.last_stored == y.last_stored


def _reads(root, **kw):
    """The same reads through a fresh store: batches over frequencies, as_of, metadata, read()."""
    st = KlineStore(root, **kw)
    out = [
        st.read_windows(ALL, 512),  # >= 16 symbols, no frequency: one listing per call
        st.read_windows(["EURUSD", "SYNCN", "GOOG"], 1000, as_of="2018-01-05 12:00"),
        st.read_windows(["GOOG", "SPX", "EURUSD"], 64, as_of="2010-06-01 00:00+00:00"),
        st.read_windows(["G03", "G17"], 2000),  # whole short histories
    ]
    metas = [st.metadata(s) for s in ("SYNCN", "GOOG", "EURUSD", "G05")]
    frames = [st.read(s, start="2012-01-01", end="2013-01-01") for s in ("GOOG", "SPX")]
    return st, out, metas, frames


def _same_reads(root, **kw):
    st, got, gmeta, gframes = _reads(root, **kw)
    _, want, wmeta, wframes = _reads(root, snapshot=False)
    for a, b in zip(got, want):
        _same(a, b)
    assert gmeta == wmeta
    for a, b in zip(gframes, wframes):
        assert a.equals(b)
    return st


def test_layout_and_snapshot_invisible_as_a_symbol(store):
    root = store.root
    for f in ("1d", "1h", "5min"):
        assert (root / f / SNAPSHOT_NAME).is_file()
    assert store.symbols() == sorted(ALL)
    with pa.memory_map(str(root / "1h" / SNAPSHOT_NAME)) as src:
        reader = ipc.open_file(src)
        head = json.loads(reader.schema.metadata[b"kronos_snapshot"])
        assert reader.schema.names == ["timestamps", *FEATURES]
    assert head["format"] == "kronos-kline-snapshot" and head["frequency"] == "1h"
    index = head["index"]
    fields = ("symbol", "batch", "offset", "rows", "inode", "size", "mtime_ns", "meta")
    assert sorted(index) == sorted(fields)
    (sym, batch, offset, rows, ino, size, mtime, meta) = (index[f][0] for f in fields)
    st = os.stat(root / "1h" / "EURUSD.arrow")
    assert (sym, batch, offset) == ("EURUSD", 0, 0) and (ino, size, mtime) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )
    assert rows == meta["rows"] == head["rows"] and meta["timezone"] == "UTC"


def test_snapshot_used_when_fresh_and_identical_to_files(store):
    st = _same_reads(store.root)
    assert st.opened == {"snapshot": len(ALL), "file": 0}
    # and views into one mapping per frequency, not copies
    entry = st._entry("GOOG", None)
    assert not entry.ts.flags.owndata and not entry.block.flags.owndata
    # cached afterwards: a second read opens nothing
    st.read_windows(ALL, 512)
    assert st.opened == {"snapshot": len(ALL), "file": 0}


def test_multiple_record_batches(tmp_path, store, monkeypatch):
    monkeypatch.setattr(snapshot_mod, "SNAPSHOT_BATCH_ROWS", 1000)  # a few symbols per batch
    store.compact("1d", fsync=False)
    with pa.memory_map(str(store.root / "1d" / SNAPSHOT_NAME)) as src:
        assert ipc.open_file(src).num_record_batches > 5
    st = _same_reads(store.root)
    assert st.opened["file"] == 0


def test_append_after_compaction_is_read_from_its_file(store, real_frames):
    cached = KlineStore(store.root)
    before = cached.read_windows(["GOOG", "G00"], 5)
    assert cached.opened == {"snapshot": 2, "file": 0}
    goog = _clean(real_frames["goog_daily.csv"])
    store.write("G00", goog.iloc[300:310], frequency="1d", fsync=False)  # 10 new candles
    for st in (cached, KlineStore(store.root)):
        after = st.read_windows(["GOOG", "G00"], 5)
        v, ts = series(after, 1)
        np.testing.assert_array_equal(ts, goog["timestamps"].iloc[305:310])
        np.testing.assert_array_equal(v[:, 3], goog["close"].iloc[305:310].astype(np.float32))
        assert metadata(after)[1]["rows"] == 310 and metadata(before)[1]["rows"] == 300
    assert cached.opened == {"snapshot": 2, "file": 1}  # only the stale symbol re-opened
    _same_reads(store.root)
    # until the next compaction takes the new file in
    store.compact("1d", fsync=False)
    st = _same_reads(store.root)
    assert st.opened["file"] == 0


def test_replaced_deleted_and_new_symbols_after_compaction(store, real_frames):
    goog = _clean(real_frames["goog_daily.csv"])
    store.write("G01", goog.iloc[:301], frequency="1d", overwrite=True, fsync=False)
    os.unlink(store.root / "1d" / "G02.arrow")
    store.write("NEW", goog.iloc[:40], frequency="1d", fsync=False)
    st = KlineStore(store.root)
    batch = st.read_windows(["G01", "G02", "NEW"], 512)
    assert batch.symbols == ["G01", "NEW"] and lengths(batch) == [301, 40]
    np.testing.assert_array_equal(series(batch, 0)[1], goog["timestamps"].iloc[:301])
    assert [(e.symbol, e.code) for e in batch.errors] == [("G02", "unknown_symbol")]
    assert st.opened == {"snapshot": 0, "file": 2}


def _mutate_index(data: bytes, edit) -> bytes:
    reader = ipc.open_file(pa.BufferReader(data))
    table = reader.read_all()
    head = json.loads(table.schema.metadata[b"kronos_snapshot"])
    table = edit(table, head)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _with_head(table, head):
    return table.replace_schema_metadata({b"kronos_snapshot": json.dumps(head).encode()})


def _offset_past_end(table, head):
    head["index"]["rows"][-1] += 1
    return _with_head(table, head)


def _gap(table, head):
    head["index"]["offset"][1] += 1
    return _with_head(table, head)


def _not_int(table, head):
    head["index"]["inode"][2] = str(head["index"]["inode"][2])
    return _with_head(table, head)


def _short_column(table, head):
    head["index"]["mtime_ns"].pop()
    return _with_head(table, head)


def _wrong_frequency(table, head):
    head["frequency"] = "1h"
    return _with_head(table, head)


def _future_version(table, head):
    head["version"] = 99
    return _with_head(table, head)


def _twice(table, head):
    head["index"]["symbol"][1] = head["index"]["symbol"][0]
    return _with_head(table, head)


def _no_index(table, head):
    return table.replace_schema_metadata({})


def _nulls(table, head):
    col = table.column("close").to_pylist()
    col[3] = None
    return table.set_column(4, pa.field("close", pa.float64()), pa.array(col))


@pytest.mark.parametrize(
    "mutate,what",
    [
        *COMMON_DAMAGE,
        (lambda b: _mutate_index(b, _offset_past_end), "index past the rows"),
        (lambda b: _mutate_index(b, _gap), "index with a gap"),
        (lambda b: _mutate_index(b, _wrong_frequency), "other frequency"),
        (lambda b: _mutate_index(b, _future_version), "unknown version"),
        (lambda b: _mutate_index(b, _twice), "symbol twice"),
        (lambda b: _mutate_index(b, _not_int), "inode not a number"),
        (lambda b: _mutate_index(b, _short_column), "index column short"),
        (lambda b: _mutate_index(b, _no_index), "no index"),
        (lambda b: _mutate_index(b, _nulls), "null values"),
        (
            lambda b: _mutate_index(
                b,
                lambda t, h: _with_head(t, h).replace_schema_metadata({b"kronos_snapshot": b"{x"}),
            ),
            "index not JSON",
        ),
    ],
)
def test_corrupt_snapshot_falls_back_to_files(store, mutate, what, caplog):
    path = store.root / "1d" / SNAPSHOT_NAME
    path.write_bytes(mutate(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="kronos_core.data.store"):
        st = _same_reads(store.root)
    assert st.opened["file"] == 22, what  # every daily symbol from its file
    assert st.opened["snapshot"] == 2, what  # the other frequencies still snapshot
    assert any("ignoring snapshot" in r.getMessage() for r in caplog.records), what


def test_unsorted_rows_in_snapshot_fall_back_for_that_symbol(store, caplog):
    path = store.root / "1d" / SNAPSHOT_NAME

    def reverse_g05(table, head):
        k = head["index"]["symbol"].index("G05")
        off, n = head["index"]["offset"][k], head["index"]["rows"][k]
        ts = table.column("timestamps").to_numpy().copy()
        ts[off : off + n] = ts[off : off + n][::-1]
        return table.set_column(0, table.schema.field(0), pa.array(ts))

    path.write_bytes(_mutate_index(path.read_bytes(), reverse_g05))
    with caplog.at_level(logging.WARNING, logger="kronos_core.data.store"):
        st = _same_reads(store.root)
    assert "timestamps of G05 are not strictly increasing" in caplog.text
    assert st.opened == {"snapshot": len(ALL) - 1, "file": 1}


def test_bad_metadata_in_snapshot_falls_back_for_that_symbol(store, caplog):
    path = store.root / "1d" / SNAPSHOT_NAME

    def bad_meta(table, head):
        head["index"]["meta"][head["index"]["symbol"].index("G11")] = "not an object"
        return _with_head(table, head)

    path.write_bytes(_mutate_index(path.read_bytes(), bad_meta))
    with caplog.at_level(logging.WARNING, logger="kronos_core.data.store"):
        st = _same_reads(store.root)
    assert "metadata of G11 is not a JSON object" in caplog.text
    assert st.opened == {"snapshot": len(ALL) - 1, "file": 1}


def test_per_symbol_errors_with_snapshot_present(store):
    eurusd = store.root / "1h" / "EURUSD.arrow"
    data = eurusd.read_bytes()
    eurusd.write_bytes(data[: len(data) // 2])  # corrupted in place after compaction
    st = KlineStore(store.root)
    batch = st.read_windows(["GOOG", "EURUSD", "NOPE", "../x", "SYNCN"], 10)
    assert batch.symbols == ["GOOG", "SYNCN"]
    assert [(e.symbol, e.code) for e in batch.errors] == [
        ("EURUSD", "corrupt_file"),
        ("NOPE", "unknown_symbol"),
        ("../x", "invalid_symbol"),
    ]
    with pytest.raises(store_mod.CorruptFileError):
        st.metadata("EURUSD")
    # no candles up to as_of is still that symbol's error
    assert KlineStore(store.root).read_windows(["GOOG"], 5, as_of="1990-01-01").errors[0].code == (
        "no_data"
    )


def test_corrupt_file_at_compaction_is_left_out_and_still_an_error(store):
    bad = store.root / "1d" / "G07.arrow"
    bad.write_bytes(b"garbage" * 20)
    report = store.compact("1d", fsync=False)["1d"]
    assert report["symbols"] == 21
    assert [(e.symbol, e.code) for e in report["skipped"]] == [("G07", "corrupt_file")]
    st = KlineStore(store.root, frequency="1d")
    batch = st.read_windows(["G06", "G07", "G08"], 10)
    assert batch.symbols == ["G06", "G08"] and batch.errors[0].code == "corrupt_file"
    assert st.opened == {"snapshot": 2, "file": 0}  # counts successful opens


def test_snapshot_replaced_while_open_is_picked_up(store, real_frames):
    st = KlineStore(store.root, frequency="1d")
    st.read_windows(["GOOG"], 5)
    goog = _clean(real_frames["goog_daily.csv"])
    store.write("G09", goog.iloc[:500], frequency="1d", overwrite=True, fsync=False)
    store.compact("1d", fsync=False)
    batch = st.read_windows(["G09"], 1000)
    assert lengths(batch) == [500] and st.opened == {"snapshot": 2, "file": 0}


def test_compaction_is_atomic_when_interrupted(store, monkeypatch):
    path = store.root / "1d" / SNAPSHOT_NAME
    before = path.read_bytes()

    class Crash(RuntimeError):
        pass

    real_new_file = ipc.new_file

    def crashing_new_file(sink, schema, **kw):
        writer = real_new_file(sink, schema, **kw)

        def write_batch(batch):
            raise Crash("power cut")

        writer.write_batch = write_batch
        return writer

    monkeypatch.setattr(fileformat.ipc, "new_file", crashing_new_file)
    with pytest.raises(Crash):
        store.compact("1d")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_empty_directory_loses_its_snapshot(store):
    os.unlink(store.root / "1h" / "EURUSD.arrow")
    assert store.compact("1h")["1h"] == {
        "symbols": 0,
        "rows": 0,
        "skipped": [],
        "path": str(store.root / "1h" / SNAPSHOT_NAME),
    }
    assert not (store.root / "1h" / SNAPSHOT_NAME).exists()


def test_import_and_sample_store_compact(tmp_path, real_frames):
    csv = tmp_path / "GOOG.csv"
    real_frames["goog_daily.csv"].iloc[:200].to_csv(csv, index=False)
    root = tmp_path / "imp"
    assert all(o.ok and o.frequency == "1d" for o in import_files([csv], root, progress=False))
    assert (root / "1d" / SNAPSHOT_NAME).is_file()
    real_frames["goog_daily.csv"].iloc[150:260].to_csv(csv, index=False)
    assert main(["import", str(csv), "--store", str(root), "--no-progress", "--no-compact"]) == 0
    st = KlineStore(root)
    assert lengths(st.read_windows(["GOOG"], 1000)) == [260]
    assert st.opened == {"snapshot": 0, "file": 1}  # stale entry: read from the file
    assert main(["import", str(csv), "--store", str(root), "--no-progress"]) == 0
    st = KlineStore(root)
    assert lengths(st.read_windows(["GOOG"], 1000)) == [260]
    assert st.opened == {"snapshot": 1, "file": 0}

    out = tmp_path / "sample"
    assert main(["sample-store", "--symbols", "20", "--out", str(out), "--candles", "200"]) == 0
    st = KlineStore(out)
    assert st.read_windows(st.symbols(), 100).errors == []
    assert st.opened == {"snapshot": 23, "file": 0}


def test_default_store_without_snapshot_is_compacted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KRONOS_HOME", str(tmp_path))
    root = ss.default_sample_store(n_symbols=10, n_candles=120)
    snap = root / "5min" / SNAPSHOT_NAME
    assert snap.is_file()
    for f in root.glob(f"*/{SNAPSHOT_NAME}"):  # as built before snapshots existed
        f.unlink()
    assert ss.default_sample_store(n_symbols=10, n_candles=120) == root
    assert snap.is_file()
    st = KlineStore(root)
    st.read_windows(st.symbols(frequency="5min"), 50, frequency="5min")
    assert st.opened == {"snapshot": 10, "file": 0}  # the synthetic symbols
