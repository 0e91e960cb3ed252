"""Store versions: an import is one transaction across its symbols (all published at once, or
none), readers read one version per call, a killed import leaves the last published version
and, after the next writer opens the store, no stray files; ``kronos store verify|compact|gc``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kronos_core.cli import main
from kronos_core.data.housekeeping import gc, verify
from kronos_core.data.importer import import_files
from kronos_core.data.store import KlineStore
from kronos_core.data.versions import GENERATIONS_DIR, MANIFEST_NAME

DAYS = pd.bdate_range("2024-01-02", periods=42)


def _day_files(folder: Path, symbols: list[str], days: pd.DatetimeIndex, tag: str) -> list[Path]:
    """One CSV per symbol holding ``days``; prices encode (symbol number, day) so that reads
    can be traced to the file they came from."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, sym in enumerate(symbols):
        base = 100.0 + k + np.arange(len(days)) * 0.01 + days.day_of_year.to_numpy() * 0.001
        df = pd.DataFrame({
            "timestamps": days.strftime("%Y-%m-%d"), "open": base, "high": base + 1,
            "low": base - 1, "close": base + 0.5, "volume": 1000.0 + k,
        })
        path = folder / f"{sym}.csv"
        if tag:
            path = folder / tag / f"{sym}.csv"
            path.parent.mkdir(exist_ok=True)
        df.to_csv(path, index=False)
        out.append(path)
    return out


SYMS = [f"S{i:02d}" for i in range(8)]


@pytest.fixture
def base_store(tmp_path) -> Path:
    """A versioned store of 8 daily symbols (the first 30 days), version 1."""
    root = tmp_path / "store"
    files = _day_files(tmp_path / "csv", SYMS, DAYS[:30], "base")
    out = import_files(files, root, progress=False)
    assert all(o.ok for o in out)
    assert KlineStore(root).version == 1
    return root


def _snapshot_reads(root: Path) -> dict[str, pd.DataFrame]:
    store = KlineStore(root, snapshot=False)
    return {s: store.read(s) for s in store.symbols()}


def test_import_publishes_one_version_and_readers_see_all_or_nothing(base_store, tmp_path):
    store = KlineStore(base_store)
    before = store.read_windows(SYMS, 10)
    assert before.store_version == 1
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:31], "d30")
    out = import_files(files, base_store, progress=False)
    assert all(o.ok and o.changed and o.rows_written == 1 for o in out)
    after = store.read_windows(SYMS, 10)
    assert after.store_version == 2
    assert {str(w.timestamps[-1])[:10] for w in after.windows} == {str(DAYS[30].date())}
    # the new files lie beside the old ones; the manifest names the new
    assert len(list((base_store / "1d" / GENERATIONS_DIR).glob("S00.*.arrow"))) == 2


def test_a_failing_symbol_publishes_nothing_unless_partial(base_store, tmp_path):
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:31], "d30")
    bad = pd.read_csv(files[3])
    bad.loc[0, "low"] = -1.0  # refused (non-positive price)
    bad.to_csv(files[3], index=False)
    before = _snapshot_reads(base_store)
    out = import_files(files, base_store, progress=False)
    assert [o.ok for o in out].count(False) == 1 and "zero or negative" in out[3].error
    store = KlineStore(base_store)
    assert store.version == 1
    for s, df in _snapshot_reads(base_store).items():
        pd.testing.assert_frame_equal(df, before[s])
    assert list((base_store / "1d" / GENERATIONS_DIR).glob("*.2.arrow")) == []  # removed
    out = import_files(files, base_store, progress=False, partial=True)
    assert store.version == 2 and sum(o.ok for o in out) == 7
    assert len(store.read("S03")) == 30 and len(store.read("S04")) == 31


def test_identical_reimport_changes_nothing_on_disk(base_store, tmp_path):
    files = _day_files(tmp_path / "csv", SYMS, DAYS[:30], "base")

    def state():
        return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns)
                for p in base_store.rglob("*") if p.is_file() and not p.name.endswith(".lock")}

    seen = state()
    out = import_files(files, base_store, progress=False)
    assert all(o.ok and not o.changed and o.rows_written == 0 for o in out)
    assert state() == seen and KlineStore(base_store).version == 1


def test_readers_read_one_version_per_call_during_imports(base_store, tmp_path):
    """Window reads in a loop while ten one-day imports publish: every call's windows end on
    the same day, the day its ``store_version`` published."""
    day_of_version = {1: DAYS[29]}
    day_files = []
    for i in range(30, 40):
        day_files.append(_day_files(tmp_path / "csv", SYMS, DAYS[i:i + 1], f"d{i}"))
        day_of_version[i - 28] = DAYS[i]
    reader = KlineStore(base_store)
    seen: list[tuple[int, set[str]]] = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            b = reader.read_windows(SYMS, 5)
            assert not b.errors
            seen.append((b.store_version, {str(w.timestamps[-1])[:10] for w in b.windows}))

    t = threading.Thread(target=loop)
    t.start()
    try:
        for files in day_files:
            assert all(o.ok for o in import_files(files, base_store, progress=False))
    finally:
        stop.set()
        t.join()
    assert len({v for v, _ in seen}) >= 3, "the reads should span several versions"
    for version, days in seen:
        assert days == {str(day_of_version[version].date())}, (version, days)


_KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from kronos_core.data import store_txn, versions
    from kronos_core.data.importer import import_files

    root, kill_at, *files = sys.argv[1:]
    kill_at = int(kill_at)
    count = [0]
    real_write = store_txn.write_arrow_atomic
    real_publish = store_txn.publish

    def write(path, table, fsync=True):
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        count[0] += 1
        real_write(path, table, fsync=fsync)

    def publish(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    real_new = store_txn.write_arrow_new

    def write_new(path, table):  # a transaction's first write of a symbol
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        count[0] += 1
        real_new(path, table)

    store_txn.write_arrow_atomic = write
    store_txn.write_arrow_new = write_new
    if kill_at < 0:
        store_txn.publish = publish
    import_files(files, root, progress=False)
""")


@pytest.mark.parametrize("kill_at", [0, 1, 4, 7, -1])  # before file k is written; -1: at publish
def test_killed_import_leaves_the_last_published_version(base_store, tmp_path, kill_at):
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:32], "d30")
    before = _snapshot_reads(base_store)
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, str(base_store), str(kill_at), *map(str, files)],
        capture_output=True, timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    store = KlineStore(base_store)
    assert store.version == 1
    for s, df in _snapshot_reads(base_store).items():
        pd.testing.assert_frame_equal(df, before[s])
    assert verify(base_store).ok
    assert main(["store", "verify", str(base_store)]) == 0
    # the next writer removes what the dead import left; then the import goes through
    out = import_files(files, base_store, progress=False)
    assert all(o.ok for o in out) and store.version == 2
    gen = base_store / "1d" / GENERATIONS_DIR
    assert sorted(p.name for p in gen.iterdir()) == sorted(
        [f"{s}.1.arrow" for s in SYMS] + [f"{s}.2.arrow" for s in SYMS]
    )


def test_verify_names_a_damaged_file(base_store):
    assert verify(base_store).ok
    victim = next((base_store / "1d" / GENERATIONS_DIR).glob("S02.*.arrow"))
    victim.write_bytes(victim.read_bytes()[:100])
    r = verify(base_store)
    assert not r.ok and any(str(victim) in p for p in r.problems)
    assert main(["store", "verify", str(base_store)]) == 1


def test_gc_removes_leftovers_after_the_grace_period(base_store, tmp_path):
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:31], "d30")
    import_files(files, base_store, progress=False)  # version 2 supersedes version 1's files
    freq = base_store / "1d"
    tmp = freq / GENERATIONS_DIR / ".S00.9.arrow.123.abcd.tmp"
    tmp.write_bytes(b"x" * 1000)
    dead = freq / GENERATIONS_DIR / "S01.9.arrow"  # an unpublished version's file
    dead.write_bytes(b"y" * 10)
    lock = freq / ".S05.lock"
    lock.write_bytes(b"")
    young = gc(base_store, grace_s=3600)
    assert young.removed == [str(lock)] and young.kept_young == len(SYMS) + 2
    old = os.stat(tmp).st_mtime - 7200
    for p in [tmp, dead, *freq.glob(f"{GENERATIONS_DIR}/*.2.arrow")]:
        os.utime(p, (old, old))  # version 2 published two hours ago
    r = gc(base_store, grace_s=3600)
    assert str(tmp) in r.removed and str(dead) in r.removed
    assert sorted(p.name for p in (freq / GENERATIONS_DIR).iterdir()) == [
        f"{s}.2.arrow" for s in SYMS
    ]
    assert verify(base_store).ok and len(KlineStore(base_store).read("S00")) == 31


def test_store_commands(base_store, capsys):
    assert main(["store", "compact", str(base_store)]) == 0
    assert (base_store / "1d" / "_snapshot.arrow").exists()
    assert main(["store", "gc", str(base_store), "--dry-run"]) == 0
    assert main(["store", "verify", str(base_store)]) == 0
    out = capsys.readouterr().out
    assert "store version 1, 8 file(s), 240 candles: ok" in out


def test_unversioned_store_becomes_versioned_at_its_first_import(tmp_path):
    root = tmp_path / "old"
    store = KlineStore(root)
    frame = pd.DataFrame({"timestamps": DAYS[:5], "open": 1.0, "high": 2.0, "low": 0.5,
                          "close": 1.5, "volume": 10.0, "amount": 15.0})
    store.write("OLD", frame)  # written in place, as before versions
    assert store.version == 0 and (root / "1d" / "OLD.arrow").exists()
    assert not (root / MANIFEST_NAME).exists()
    files = _day_files(tmp_path / "csv", ["NEW"], DAYS[:5], "")
    assert all(o.ok for o in import_files(files, root, progress=False))
    assert store.version == 1 and store.symbols() == ["NEW", "OLD"]
    assert len(store.read("OLD")) == 5  # its plain file is generation 0 of version 1
    store.write("OLD", frame.assign(timestamps=DAYS[5:10]))  # now a one-symbol transaction
    assert store.version == 2 and len(store.read("OLD")) == 10
    assert verify(root).ok


def test_reads_of_several_symbols_from_one_version(base_store, tmp_path):
    """What ``kronos eval`` does with a store: take the manifest once, read every symbol from
    it, while an import publishes the next version."""
    from kronos_core.eval.data import _from_store

    store = KlineStore(base_store)
    v1 = store.manifest()
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:31], "d30")
    assert all(o.ok for o in import_files(files, base_store, progress=False))
    assert [len(store.read(s, manifest=v1)) for s in SYMS] == [30] * len(SYMS)
    assert [len(store.read(s)) for s in SYMS] == [31] * len(SYMS)
    assert [len(s) for s in _from_store(base_store, None)] == [31] * len(SYMS)


# -- issue 52: faults planted in the store that no test noticed ---------------------------------


def test_gc_after_a_partial_import_keeps_the_older_files_the_manifest_still_names(
    base_store, tmp_path
):
    """A new day for three of the eight symbols: the other five stay on version 1's files,
    which are not garbage however old they are."""
    few = SYMS[:3]
    files = _day_files(tmp_path / "csv", few, DAYS[30:31], "d30")
    assert all(o.ok for o in import_files(files, base_store, progress=False))
    m = KlineStore(base_store).manifest()
    assert m.version == 2 and {m.files["1d"][s] for s in SYMS[3:]} == {1}
    old = DAYS[0].timestamp()
    for p in (base_store / "1d" / GENERATIONS_DIR).iterdir():
        os.utime(p, (old, old))  # everything long past the grace period
    r = gc(base_store, grace_s=3600)
    assert sorted(r.removed) == [str(base_store / "1d" / GENERATIONS_DIR / f"{s}.1.arrow")
                                 for s in few]
    assert verify(base_store).ok
    store = KlineStore(base_store, snapshot=False)
    assert [len(store.read(s)) for s in SYMS] == [31] * 3 + [30] * 5


def test_verify_reports_a_deleted_file_and_a_nan(base_store):
    from kronos_core.data.fileformat import open_file, stat_key, to_table, write_arrow_atomic

    m = KlineStore(base_store).manifest()
    gone = Path(m.path(str(base_store), "1d", "S03"))
    gone.unlink()
    r = verify(base_store)
    assert not r.ok and any(str(gone) in p and "missing" in p for p in r.problems), r.problems
    assert main(["store", "verify", str(base_store)]) == 1
    # a file that reads, with one NaN close
    nan_file = Path(m.path(str(base_store), "1d", "S04"))
    entry = open_file("S04", str(nan_file), stat_key(nan_file.stat()), "1d")
    values = np.stack([np.array(c) for c in entry.cols], axis=1)
    values[5, 3] = np.nan
    write_arrow_atomic(nan_file, to_table(np.array(entry.ts), values, json_meta(entry)))
    r = verify(base_store)
    assert any(str(nan_file) in p and "NaN" in p and "close" in p for p in r.problems), r.problems


def json_meta(entry) -> dict:
    import json

    return json.loads(entry.raw_meta)


def test_two_imports_at_the_same_moment_both_land(base_store, tmp_path, monkeypatch):
    """Two imports of other symbols start together. The store lock lets one in at a time: the
    second waits and builds on the first's version, so nothing is lost. (Each holds its first
    write until the other has written too, or a second has passed: with a lock both can hold,
    both then build on version 1 and the second publish drops the first's symbol.)"""
    from kronos_core.data.store_writer import KlineWriter

    both_in = threading.Barrier(2, timeout=1.0)
    real = KlineWriter.symbol_update

    def symbol_update(self, *a, **kw):
        try:
            both_in.wait()
        except threading.BrokenBarrierError:
            pass  # the other import is waiting for the lock (as it must)
        return real(self, *a, **kw)

    monkeypatch.setattr(KlineWriter, "symbol_update", symbol_update)
    jobs = [_day_files(tmp_path / "csv", [s], DAYS[30:31], f"d30{s}") for s in ("S00", "S01")]
    results: list[list] = []
    threads = [threading.Thread(target=lambda f=f: results.append(
        import_files(f, base_store, progress=False, compact=False))) for f in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(o.ok and o.changed for r in results for o in r)
    store = KlineStore(base_store, snapshot=False)
    assert store.version == 3
    assert [len(store.read(s)) for s in SYMS[:3]] == [31, 31, 30]


def test_a_killed_imports_files_are_gone_after_the_next_import_of_a_few_symbols(
    base_store, tmp_path
):
    """The dead import wrote version 2's files of all eight symbols; the next import (of two)
    publishes version 2 itself: the dead files must not stay beside it as if it had written
    them, and the symbols it did not touch read their published candles."""
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:32], "d30")
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, str(base_store), "-1", *map(str, files)],
        capture_output=True, timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    gen = base_store / "1d" / GENERATIONS_DIR
    assert len(list(gen.glob("*.2.arrow"))) == len(SYMS)  # what the dead import left
    few = _day_files(tmp_path / "csv", SYMS[:2], DAYS[30:31], "few")
    assert all(o.ok for o in import_files(few, base_store, progress=False))
    assert KlineStore(base_store).version == 2
    assert sorted(p.name for p in gen.iterdir()) == sorted(
        [f"{s}.1.arrow" for s in SYMS] + [f"{s}.2.arrow" for s in SYMS[:2]]
    )
    store = KlineStore(base_store, snapshot=False)
    assert [len(store.read(s)) for s in SYMS] == [31, 31] + [30] * 6
    assert verify(base_store).ok and sorted(gc(base_store, grace_s=0).removed) == [
        str(gen / f"{s}.1.arrow") for s in SYMS[:2]
    ]
    assert verify(base_store).ok


def test_gc_removes_a_killed_imports_files(base_store, tmp_path):
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:32], "d30")
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, str(base_store), "-1", *map(str, files)],
        capture_output=True, timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL
    gen = base_store / "1d" / GENERATIONS_DIR
    r = gc(base_store, grace_s=0)
    assert sorted(r.removed) == sorted(str(gen / f"{s}.2.arrow") for s in SYMS)
    assert verify(base_store).ok and KlineStore(base_store).version == 1


def test_a_small_append_leaves_the_snapshot_and_compact_rewrites_it(base_store, tmp_path):
    """A day's append is work on the new rows: the read snapshot (a rewrite of the whole
    history) is left as it was unless asked for; reads stay right, from the symbols' files."""
    snap = base_store / "1d" / "_snapshot.arrow"
    before = snap.stat().st_mtime_ns
    files = _day_files(tmp_path / "csv", SYMS, DAYS[30:31], "d30")  # 8 of 240 candles: 3%
    assert all(o.ok for o in import_files(files, base_store, progress=False))
    assert snap.stat().st_mtime_ns == before
    fresh = KlineStore(base_store)
    assert [len(w.values) for w in fresh.read_windows(SYMS, 100).windows] == [31] * len(SYMS)
    assert fresh.opened == {"snapshot": 0, "file": len(SYMS)}
    more = _day_files(tmp_path / "csv", SYMS, DAYS[31:32], "d31")
    assert main(["import", *map(str, more), "--store", str(base_store), "--no-progress",
                 "--compact"]) == 0
    fresh = KlineStore(base_store)
    assert [len(w.values) for w in fresh.read_windows(SYMS, 100).windows] == [32] * len(SYMS)
    assert fresh.opened == {"snapshot": len(SYMS), "file": 0}
    # a bigger import (ten more days, 80 candles to 256) rewrites it by itself
    compacted = snap.stat().st_mtime_ns
    ten = _day_files(tmp_path / "csv", SYMS, DAYS[32:42], "d32")
    assert all(o.ok for o in import_files(ten, base_store, progress=False))
    assert snap.stat().st_mtime_ns > compacted
    fresh = KlineStore(base_store)
    assert [len(w.values) for w in fresh.read_windows(SYMS, 100).windows] == [42] * len(SYMS)
    assert fresh.opened == {"snapshot": len(SYMS), "file": 0}
