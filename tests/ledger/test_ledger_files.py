"""The ledger's files: append and read back, atomic appends, corrupt files, unwritable
folders, retention."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest
from ledger_helpers import SHA, START, record

from kronos_core.ledger import CalibrationStamp, Ledger, LedgerError, LedgerWriteError, series_hash
from kronos_core.ledger.ledger import partition_files


def test_record_and_read_round_trip(tmp_path):
    led = Ledger(tmp_path / "ledger", writer_id="gw-1")
    stamp = CalibrationStamp("aci", 3, "f00d", datetime(2026, 1, 2, tzinfo=timezone.utc))
    recs = [record("AAA", START, 4, request_id="req-1", calibration=stamp, last_close=99.5),
            record("BBB", START, 4, request_id="req-1", seed=2)]
    path = led.record(recs)
    assert path is not None and path.parent.name.startswith("date=") and path.name.startswith("gw-1-")
    t = led.read()
    assert t.num_rows == 8  # 2 symbols x 4 steps
    df = t.to_pandas()
    a = df[df.symbol == "AAA"].sort_values("horizon_step")
    assert list(a.horizon_step) == [1, 2, 3, 4]
    assert list(a.step_time) == list(pd.date_range(START + pd.Timedelta(days=1), periods=4, freq="D"))
    assert (a.origin == START).all() and (a.model_sha256 == SHA).all() and (a.horizon == 4).all()
    np.testing.assert_allclose(a.mean_close, recs[0].mean["close"])
    np.testing.assert_allclose(a["close_q0.1"], recs[0].quantiles[0.1]["close"])
    assert (a.calibration_method == "aci").all() and (a.calibration_version == 3).all()
    assert (a.calibration_hash == "f00d").all() and (a.last_close == 99.5).all()
    b = df[df.symbol == "BBB"]
    assert b.calibration_method.isna().all() and b.last_close.isna().all()
    assert "paths_close" not in t.column_names  # paths only when configured
    assert led.read(symbol="BBB").num_rows == 4
    assert led.read(model=SHA[:8]).num_rows == 8 and led.read(model="test-model").num_rows == 8
    assert led.read(model="other").num_rows == 0
    assert led.read(since=datetime.now(timezone.utc) + timedelta(days=1)).num_rows == 0


def test_levels_differ_between_requests_and_paths_kept(tmp_path):
    led = Ledger(tmp_path, keep_paths=True)
    led.record([record("AAA", START, 3, request_id="a", quantiles=(0.1, 0.9),
                       paths=np.arange(15, dtype=float).reshape(5, 3))])
    led.record([record("AAA", START, 3, request_id="b", quantiles=(0.05, 0.5, 0.95))])
    t = led.read().to_pandas().sort_values(["request_id", "horizon_step"])
    assert {"close_q0.1", "close_q0.9", "close_q0.05", "close_q0.95", "close_q0.5"} <= set(t.columns)
    assert t[t.request_id == "a"]["close_q0.05"].isna().all()
    assert list(t[t.request_id == "a"].paths_close.iloc[1]) == [1.0, 4.0, 7.0, 10.0, 13.0]
    assert t[t.request_id == "b"].paths_close.isna().all()


def test_inline_series_hash(tmp_path):
    ts = pd.date_range("2026-01-01", periods=5, freq="D")
    vals = np.arange(30, dtype=float).reshape(5, 6) + 1
    h = series_hash(ts, vals)
    assert h == series_hash(list(ts), vals.astype(np.float32).astype(float)) and len(h) == 64
    vals2 = vals.copy()
    vals2[2, 3] += 1e-6
    assert series_hash(ts, vals2) != h and series_hash(ts + pd.Timedelta(minutes=1), vals) != h
    led = Ledger(tmp_path)
    led.record([record("INL", ts[-1], 2, source="inline", series_hash=h)])
    t = led.read().to_pandas()
    assert (t.source == "inline").all() and (t.series_hash == h).all()


def test_a_step_not_after_its_origin_is_refused(tmp_path):
    rec = record("AAA", START, 2)
    rec.timestamps = [START, START + pd.Timedelta(days=1)]
    with pytest.raises(ValueError, match="not after the origin"):
        Ledger(tmp_path).record([rec])


def test_crash_before_rename_leaves_earlier_rows_readable(tmp_path):
    led = Ledger(tmp_path / "ledger")
    led.record([record("AAA", START, 3, request_id="before")])
    # a writer killed after writing its temporary file and before the rename: the same code
    # path as ``record``, with os.replace made to kill the process
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = {sys.path!r}
        from ledger_helpers import record, START
        from kronos_core.ledger import Ledger
        os.replace = lambda *a: os.kill(os.getpid(), 9)
        Ledger({str(tmp_path / "ledger")!r}).record([record("BBB", START, 3, request_id="crashed")])
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.path.dirname(__file__), timeout=120)
    assert proc.returncode == -9
    part = partition_files(tmp_path / "ledger")
    assert len(part) == 1
    tmp_files = [p for p in part[0].parent.iterdir() if p.name.endswith(".tmp")]
    assert len(tmp_files) == 1  # the crashed write's leftover, ignored by readers
    t = led.read()
    assert t.num_rows == 3 and set(t["request_id"].to_pylist()) == {"before"}
    assert led.skipped == []
    # retention removes the stale temporary file (an hour later)
    removed = led.enforce_retention(now=datetime.now(timezone.utc) + timedelta(hours=2))
    assert removed == tmp_files


def test_killed_mid_write_loses_only_that_call(tmp_path):
    """A writer killed at a random point of many appends: every file the ledger lists reads,
    and every row read belongs to a completed call."""
    root = tmp_path / "ledger"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {sys.path!r}
        from ledger_helpers import record, START
        from kronos_core.ledger import Ledger
        led = Ledger({str(root)!r})
        for i in range(100000):
            led.record([record(f"S{{j}}", START, 24, request_id=f"r{{i}}") for j in range(50)])
            print(i, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=os.path.dirname(__file__),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(3):
        proc.stdout.readline()
    proc.kill()
    proc.wait(timeout=60)
    t = Ledger(root).read()
    counts = t.group_by("request_id").aggregate([("symbol", "count")]).to_pydict()
    assert counts["symbol_count"] and set(counts["symbol_count"]) == {50 * 24}


def test_corrupt_file_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    led = Ledger(tmp_path)
    led.record([record("AAA", START, 3, request_id="good")])
    bad = led.record([record("BBB", START, 3, request_id="bad")])
    assert bad is not None
    bad.write_bytes(bad.read_bytes()[: 40])
    with caplog.at_level(logging.WARNING, logger="kronos_core.ledger"):
        t = led.read()
    assert set(t["request_id"].to_pylist()) == {"good"}
    assert str(bad) in caplog.text
    assert [p for p, _ in led.skipped] == [bad]


def test_unwritable_folder_raises_a_catchable_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(LedgerWriteError, match=str(locked)) as info:
            Ledger(locked / "ledger").record([record("AAA", START, 2)])
        assert isinstance(info.value, LedgerError)
    finally:
        locked.chmod(0o700)


def test_a_file_where_the_folder_should_be_raises_a_catchable_error(tmp_path):
    (tmp_path / "ledger").write_text("not a folder")
    with pytest.raises(LedgerWriteError, match="cannot write ledger file"):
        Ledger(tmp_path / "ledger").record([record("AAA", START, 2)])


def _backdate(led: Ledger, days_ago: int, request_id: str) -> None:
    when = datetime.now(timezone.utc) - timedelta(days=days_ago)
    led.record([record("AAA", START, 24, request_id=request_id, request_time=when)])


def test_retention_by_days(tmp_path):
    led = Ledger(tmp_path, retention_days=7)
    for age in (30, 10, 3, 0):
        _backdate(led, age, f"age{age}")
    removed = led.enforce_retention()
    assert len(removed) == 2
    assert set(led.read()["request_id"].to_pylist()) == {"age3", "age0"}
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("date=")]) == 2


def test_retention_by_bytes_drops_the_oldest_first(tmp_path):
    led = Ledger(tmp_path)
    for age in (5, 4, 3, 2, 1):
        _backdate(led, age, f"age{age}")
    sizes = [p.stat().st_size for p in partition_files(tmp_path)]
    led.retention_bytes = sum(sizes[-2:])
    led.enforce_retention()
    assert set(led.read()["request_id"].to_pylist()) == {"age2", "age1"}
    assert led.disk_bytes() <= led.retention_bytes


def test_bad_writer_id_and_missing_close():
    with pytest.raises(ValueError, match="writer_id"):
        Ledger("x", writer_id="a/b")
    with pytest.raises(ValueError, match="close"):
        Ledger("x", features=("open",))
