"""The sample store: reproducible, realistic synthetic candles plus the bundled real series."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from data_helpers import REAL_FILES

from kronos_core.cli import main
from kronos_core.data import sample_store as ss
from kronos_core.data.store import KlineStore


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    return ss.build_sample_store(
        tmp_path_factory.mktemp("ss") / "store", n_symbols=300, seed=7, n_candles=1000
    )


def _windows(root, symbols, lookback=1000):
    return KlineStore(root, frequency="5min").read_windows(symbols, lookback)


def test_reproducible_from_seed(tmp_path, small_store):
    again = ss.build_sample_store(tmp_path / "again", n_symbols=300, seed=7, n_candles=1000)
    other = ss.build_sample_store(
        tmp_path / "other", n_symbols=300, seed=8, n_candles=1000, include_real=False
    )
    syms = [f"SYN{i:04d}" for i in range(0, 300, 37)]
    a, b, c = _windows(small_store, syms), _windows(again, syms), _windows(other, syms)
    assert a.symbols == b.symbols == c.symbols
    for wa, wb in zip(a.windows, b.windows, strict=True):
        np.testing.assert_array_equal(wa.values, wb.values)
        np.testing.assert_array_equal(wa.timestamps, wb.timestamps)
    assert not all(np.array_equal(wa.values, wc.values) for wa, wc in zip(a.windows, c.windows))


def test_real_series_included_with_source(small_store):
    st = KlineStore(small_store)
    for sym, real in ss.REAL_SERIES.items():
        meta = st.metadata(sym)
        assert (
            meta["frequency"], meta["timezone"], meta["session_timezone"], meta["exchange"],
        ) == (
            real.frequency,
            real.timezone,
            real.session_timezone,
            real.exchange,
        )
        assert meta["source"] == real.source
        df = pd.read_csv(ss.REAL_DIR / real.file)
        assert meta["rows"] == len(df)
        np.testing.assert_array_equal(
            st.read(sym)["close"].to_numpy(), df["close"].to_numpy(dtype=float)
        )
    assert len(st.symbols()) == 300 + len(ss.REAL_SERIES)
    assert {s: st.metadata(s)["exchange"] for s in ss.REAL_SERIES} == {
        "GOOG": "XNAS", "EURUSD": None, "SPX": "XNYS"}
    # only bundled files: the real symbols are exactly those of kronos_core/data/real/
    assert sorted(real.file for real in ss.REAL_SERIES.values()) == sorted(REAL_FILES)
    assert sorted(p.name for p in ss.REAL_DIR.glob("*.csv")) == sorted(REAL_FILES)


def test_bundled_copies_match_the_hashes_in_their_readme():
    """The bundled CSVs are the byte-for-byte copies their README says (SHA-256 of the
    originals)."""
    readme = (ss.REAL_DIR / "README.md").read_text()
    listed = {
        name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+\.csv)$", readme, re.M)
    }
    assert sorted(listed) == sorted(REAL_FILES)
    for name in REAL_FILES:
        assert hashlib.sha256((ss.REAL_DIR / name).read_bytes()).hexdigest() == listed[name], name


def test_realistic_features(small_store):
    st = KlineStore(small_store, frequency="5min")
    syms = [s for s in st.symbols() if s.startswith("SYN")]
    batch = st.read_windows(syms, 1000)
    full = np.array([len(w.values) for w in batch.windows]) == 1000
    assert 0.8 < full.mean() < 0.98  # about one in ten lists later: shorter history
    # (n, 1000, 6)
    v = np.stack([w.values for w in batch.windows if len(w.values) == 1000]).astype(np.float64)
    ts = np.stack([w.timestamps for w in batch.windows if len(w.values) == 1000])  # (n, 1000)
    o, h, lo, c, vol, amt = (v[..., j] for j in range(6))
    assert (h >= np.maximum(o, c)).all() and (lo <= np.minimum(o, c)).all() and (lo > 0).all()
    assert (vol >= 0).all() and (amt >= 0).all()
    # heavy tails: excess kurtosis of standardized intraday returns
    r = np.diff(np.log(c), axis=1)
    z = (r - r.mean(1, keepdims=True)) / r.std(1, keepdims=True)
    assert (z**4).mean() > 4.5
    # volatility clustering: |r| autocorrelated
    a = np.abs(z)
    a = a - a.mean(1, keepdims=True)
    acf1 = (a[:, 1:] * a[:, :-1]).mean() / (a**2).mean()
    assert acf1 > 0.1
    # a spread of price levels
    assert c[:, 0].max() / c[:, 0].min() > 30
    # sessions: weekdays only; Shanghai-style symbols have a lunch break
    idx = pd.DatetimeIndex(ts.ravel())
    assert (idx.day_of_week < 5).all()
    markets = [st.metadata(s)["market"] for s, f in zip(syms, full) if f]
    cn = np.array([m == "CN" for m in markets])
    cn_idx = pd.DatetimeIndex(ts[cn].ravel())
    minutes = cn_idx.hour * 60 + cn_idx.minute
    assert not ((minutes > 11 * 60 + 30) & (minutes < 13 * 60)).any()
    assert minutes.min() == 9 * 60 + 35 and minutes.max() == 15 * 60
    # U-shaped intraday volume: open and close busier than midday
    vcn = vol[cn]
    m = minutes.to_numpy().reshape(vcn.shape)
    first, mid, last = (
        vcn[m == 9 * 60 + 35].mean(),
        vcn[m == 11 * 60].mean(),
        vcn[m == 15 * 60].mean(),
    )
    assert first > 1.5 * mid and last > 1.5 * mid


def test_cli_sample_store(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["sample-store", "--symbols", "25", "--out", str(out), "--candles", "200"]) == 0
    assert "wrote 28 symbols (25 synthetic)" in capsys.readouterr().out
    assert KlineStore(out).metadata("SYN0024")["rows"] <= 200


def _call_default(home, queue):
    import os

    os.environ["KRONOS_HOME"] = home
    from kronos_core.data.sample_store import default_sample_store

    queue.put(str(default_sample_store(n_symbols=50, n_candles=300)))


def test_default_store_built_once_atomically_by_racing_processes(tmp_path):
    home = str(tmp_path / "home")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_call_default, args=(home, q)) for _ in range(2)]
    for p in procs:
        p.start()
    paths = {q.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(paths) == 1
    root = paths.pop()
    assert (tmp_path / "home").exists() and root.startswith(home)
    assert len(KlineStore(root).symbols()) == 53
    leftovers = [
        p.name for p in (tmp_path / "home").iterdir() if p.name.endswith((".tmp", ".trash"))
    ]
    assert leftovers == []


def test_default_sample_store_2000_symbols_built_once(tmp_path, monkeypatch):
    """(Build time is a benchmark figure, not a test: ~1.5 s on an idle 2-core box.)"""
    monkeypatch.setenv("KRONOS_HOME", str(tmp_path))
    root = ss.default_sample_store()
    st = KlineStore(root)
    syms = st.symbols()
    assert len(syms) == 2003 and {"EURUSD", "GOOG", "SPX", "SYN1999"} <= set(syms)
    assert [s for s in syms if not s.startswith("SYN")] == ["EURUSD", "GOOG", "SPX"]
    manifest = Path(root) / ss.MANIFEST
    stamp = manifest.stat().st_mtime_ns, manifest.stat().st_ino

    def no_rebuild(*a, **k):
        raise AssertionError("the second call rebuilt the store")

    monkeypatch.setattr(ss, "build_sample_store", no_rebuild)
    assert ss.default_sample_store() == root  # second call: reuse
    assert (manifest.stat().st_mtime_ns, manifest.stat().st_ino) == stamp
