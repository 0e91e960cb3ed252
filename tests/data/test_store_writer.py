"""Writing the Arrow K-line store (``KlineWriter``): appends that keep history, overlap
policies, atomic writes, and readers that see whole versions only."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.ipc as ipc
import pytest
from data_helpers import clean_candles, lengths, series

from kronos_core.base.candles import CandleError
from kronos_core.data import fileformat
from kronos_core.data.store import KlineStore


def test_append_keeps_history_and_cached_readers_see_it(tmp_path, synthetic_cn_5min):
    full = clean_candles(synthetic_cn_5min)
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
    full = clean_candles(real_frames["goog_daily.csv"])
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
    full = clean_candles(real_frames["goog_daily.csv"])
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


def test_concurrent_reader_sees_old_or_new_never_partial(tmp_path, real_frames):
    """A reader in another process keeps reading while this one replaces the file."""
    import subprocess
    import sys
    import textwrap
    import time

    full = clean_candles(real_frames["sp500_daily.csv"])
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
