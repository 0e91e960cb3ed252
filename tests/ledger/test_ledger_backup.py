"""``kronos ledger backup`` / ``restore`` (issue 45): a copy taken while a writer records and a
scorer scores is consistent (no torn file, no score without its forecast), restores whole, and
the restored ledger scores on without scoring a step twice."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.compute as pc
import pytest
from ledger_helpers import append, candles, make_store, record

from kronos_core.ledger import Ledger, score
from kronos_core.ledger.backup import MANIFEST_NAME, BackupError, backup, restore, verify

ROOT = Path(__file__).resolve().parents[2]


def _keys(table) -> set[tuple]:
    cols = [table[c].to_pylist() for c in ("request_id", "symbol", "horizon_step")]
    return set(zip(*cols, strict=True))


def test_a_backup_of_a_live_ledger_round_trips(tmp_path, monkeypatch):
    """A copy taken while a writer records and a scorer scores. That no scoring pass runs during
    the copy is checked at every file copied (the scorers' lock must be held then), not left to
    a race that a fast copy wins (issue 52: a backup without the lock passed when copies were
    quick)."""
    import kronos_core.ledger.backup as backup_mod
    from kronos_core.data.fileformat import SymbolLock
    from kronos_core.ledger.scoring import LOCK_NAME

    held: list[Path] = []  # the locks the backup holds now

    class SeenLock(SymbolLock):
        def __enter__(self):
            out = super().__enter__()
            held.append(self.path)
            return out

        def __exit__(self, *exc):
            held.remove(self.path)
            return super().__exit__(*exc)

    scorers_lock = SymbolLock(tmp_path / "ledger", LOCK_NAME).path
    real_copy = backup_mod.shutil.copyfile
    copied_unlocked: list[str] = []

    def copy_holding_the_lock(src, dst, *a, **kw):
        if scorers_lock not in held:
            copied_unlocked.append(str(src))
        return real_copy(src, dst, *a, **kw)

    symbols = [f"S{i:02d}" for i in range(6)]
    history, horizon = 30, 4
    full = {s: candles(history + 20, seed=i) for i, s in enumerate(symbols)}
    store = make_store(tmp_path / "store", {s: f.iloc[:history] for s, f in full.items()})
    led = Ledger(tmp_path / "ledger", writer_id="gw-a")
    origin = full[symbols[0]].timestamps.iloc[history - 1]
    led.record([record(s, origin, horizon, request_id="early") for s in symbols])
    for s, f in full.items():
        append(store, s, f.iloc[history:history + horizon])
    assert score(led, store).scores.num_rows == len(symbols) * horizon

    stop = threading.Event()
    written: list[str] = []

    def writer():  # a gateway recording answers all along
        other = Ledger(tmp_path / "ledger", writer_id="gw-b")
        n = 0
        while not stop.is_set():
            rid = f"live-{n}"
            other.record([record(s, origin, horizon, request_id=rid) for s in symbols])
            written.append(rid)
            n += 1

    def scorer():  # and a scorer taking its turns
        while not stop.is_set():
            score(Ledger(tmp_path / "ledger"), store)

    threads = [threading.Thread(target=writer), threading.Thread(target=scorer)]
    for t in threads:
        t.start()
    try:
        while len(written) < 5:
            stop.wait(0.01)
        monkeypatch.setattr(backup_mod, "SymbolLock", SeenLock)
        monkeypatch.setattr(backup_mod.shutil, "copyfile", copy_holding_the_lock)
        report = backup(tmp_path / "ledger", tmp_path / "backup")
        monkeypatch.undo()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert report.files > 2 and report.bytes > 0 and report.vanished == 0
    assert copied_unlocked == []  # a scoring pass could have run while these were copied
    manifest = verify(tmp_path / "backup")
    assert all(not Path(rel).name.startswith(".") for rel in manifest["files"])  # no lock, no tmp

    restored = restore(tmp_path / "backup", tmp_path / "restored")
    assert restored.files == report.files
    back = Ledger(tmp_path / "restored")
    forecasts, scores = back.read(), back.read_scores()
    assert not back.skipped  # no torn file
    # every score in the copy has its forecast in the copy, and no step is scored twice
    assert _keys(scores) <= _keys(forecasts)
    assert len(_keys(scores)) == scores.num_rows
    # the copy holds at least the ledger as it was before the writer started
    early = forecasts.filter(pc.equal(forecasts["request_id"], "early"))
    assert early.num_rows == len(symbols) * horizon
    # every copied forecast file is whole: the rows of a request are all there or none
    per_request = pc.value_counts(forecasts["request_id"]).to_pylist()
    assert {c["counts"] for c in per_request} == {len(symbols) * horizon}
    # the restored ledger scores on: the steps left unscored, never one again
    before = scores.num_rows
    more = score(back, store).scores
    assert not (_keys(more) & _keys(scores))
    assert back.read_scores().num_rows == before + more.num_rows
    assert before + more.num_rows == forecasts.num_rows  # every step of the copy scored once


def test_restore_refuses_a_damaged_backup_and_a_used_folder(tmp_path):
    led = Ledger(tmp_path / "ledger")
    full = candles(10)
    led.record([record("AAA", full.timestamps.iloc[5], 3)])
    backup(tmp_path / "ledger", tmp_path / "backup")
    with pytest.raises(BackupError, match="exists and is not empty"):
        backup(tmp_path / "ledger", tmp_path / "backup")
    with pytest.raises(BackupError, match="exists and is not empty"):
        restore(tmp_path / "backup", tmp_path / "ledger")
    with pytest.raises(BackupError, match="inside the ledger"):
        backup(tmp_path / "ledger", tmp_path / "ledger" / "b")
    (part,) = [p for p in (tmp_path / "backup").rglob("*.parquet")]
    part.write_bytes(part.read_bytes()[:-10])
    with pytest.raises(BackupError, match=r"date=.*\.parquet differs from the manifest"):
        restore(tmp_path / "backup", tmp_path / "new")
    assert not (tmp_path / "new").exists()  # nothing half restored
    (tmp_path / "backup" / MANIFEST_NAME).unlink()
    with pytest.raises(BackupError, match="not a ledger backup"):
        verify(tmp_path / "backup")


def test_the_commands_back_up_and_restore(tmp_path):
    led = Ledger(tmp_path / "ledger")
    full = candles(10)
    led.record([record("AAA", full.timestamps.iloc[5], 3)])
    env_py = [sys.executable, "-m", "kronos_core.cli"]
    run = subprocess.run([*env_py, "ledger", "backup", str(tmp_path / "b"), "--ledger",
                          str(tmp_path / "ledger")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "1 file(s)" in run.stdout and str(tmp_path / "b") in run.stdout
    run = subprocess.run([*env_py, "ledger", "restore", str(tmp_path / "b"), "--ledger",
                          str(tmp_path / "back")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert Ledger(tmp_path / "back").read().num_rows == 3
    run = subprocess.run([*env_py, "ledger", "restore", str(tmp_path / "b"), "--ledger",
                          str(tmp_path / "back")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "exists and is not empty" in run.stderr
