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


def test_records_of_two_utc_days_go_to_two_files_each_in_its_day(tmp_path):
    led = Ledger(tmp_path / "ledger", writer_id="gw-1")
    late = datetime(2026, 3, 1, 23, 59, 59, tzinfo=timezone.utc)
    early = datetime(2026, 3, 2, 0, 0, 1, tzinfo=timezone.utc)
    led.record([record("AAA", START, 2, request_id="a", request_time=late),
                record("BBB", START, 2, request_id="b", request_time=early),
                record("CCC", START, 2, request_id="c", request_time=late)])
    files = led.files()
    assert [f.parent.name for f in files] == ["date=2026-03-01", "date=2026-03-02"]
    df = led.read().to_pandas()
    assert sorted(df.request_id.unique()) == ["a", "b", "c"] and len(df) == 6
    # a reader from the second day sees its rows, and only them
    assert set(led.read(since=early).to_pandas().request_id) == {"b"}


def test_record_and_read_round_trip(tmp_path):
    led = Ledger(tmp_path / "ledger", writer_id="gw-1")
    stamp = CalibrationStamp("aci", 3, "f00d", datetime(2026, 1, 2, tzinfo=timezone.utc))
    recs = [record("AAA", START, 4, request_id="req-1", calibration=stamp, last_close=99.5),
            record("BBB", START, 4, request_id="req-1", seed=2)]
    path = led.record(recs)
    assert (
        path is not None and path.parent.name.startswith("date=") and path.name.startswith("gw-1-")
    )
    t = led.read()
    assert t.num_rows == 8  # 2 symbols x 4 steps
    df = t.to_pandas()
    a = df[df.symbol == "AAA"].sort_values("horizon_step")
    assert list(a.horizon_step) == [1, 2, 3, 4]
    assert list(a.step_time) == list(
        pd.date_range(START + pd.Timedelta(days=1), periods=4, freq="D")
    )
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
    assert {"close_q0.1", "close_q0.9", "close_q0.05", "close_q0.95", "close_q0.5"} <= set(
        t.columns
    )
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
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=os.path.dirname(__file__), timeout=120
    )
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
    assert led.enforce_retention(days=40) == []  # an override of the setting
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
    led.enforce_retention(max_bytes=sizes[-1])  # an override of the setting
    assert set(led.read()["request_id"].to_pylist()) == {"age1"}


def test_bad_writer_id_and_missing_close():
    with pytest.raises(ValueError, match="writer_id"):
        Ledger("x", writer_id="a/b")
    with pytest.raises(ValueError, match="close"):
        Ledger("x", features=("open",))


def test_full_disk_raises_a_catchable_error_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    import kronos_core.ledger.ledger as ledger_module

    led = Ledger(tmp_path)
    led.record([record("AAA", START, 2, request_id="before")])

    def full(table, where, **kw):
        with open(where, "wb") as f:
            f.write(b"PAR1 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger_module.pq, "write_table", full)
    with pytest.raises(LedgerWriteError, match="No space left on device"):
        led.record([record("BBB", START, 2, request_id="lost")])
    monkeypatch.undo()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert set(led.read()["request_id"].to_pylist()) == {"before"}


def test_step_times_are_the_wall_clock_whatever_their_type(tmp_path):
    from kronos_core.ledger.records import wall_clock_ns_array

    want = pd.Timestamp("2026-03-02 09:30").value
    for spelling in (
        ["2026-03-02T09:30:00"], ["2026-03-02 09:30"], [pd.Timestamp("2026-03-02 09:30")],
        [pd.Timestamp("2026-03-02 09:30", tz="America/New_York")], ["2026-03-02T09:30:00+01:00"],
        ["2026-03-02T09:30:00Z"], np.array(["2026-03-02T09:30"], dtype="datetime64[m]"),
    ):
        assert wall_clock_ns_array(spelling).tolist() == [want], spelling


def test_records_from_arrays_as_the_service_holds_them(tmp_path):
    """mean (H, 6), quantiles (Q, H, 6) with their levels, paths (S, H, 6), the stamp as a dict."""
    h = 3
    mean = np.arange(h * 6, dtype=float).reshape(h, 6) + 1  # (H, 6)
    qs = np.stack([mean * 0.9, mean * 1.1])  # (Q, H, 6)
    paths = np.stack([mean, mean * 2])  # (S, H, 6)
    steps = pd.date_range(START + pd.Timedelta(days=1), periods=h, freq="D").to_numpy()
    from kronos_core.ledger import ForecastRecord

    rec = ForecastRecord(
        request_id="r", symbol="AAA", origin=np.datetime64(START), timestamps=steps, mean=mean,
        quantiles=qs, levels=[0.1, 0.9], model_sha256=SHA, paths=paths,
        calibration={
            "method": "aci", "version": 2, "hash": "beef",
            "updated_at": "2026-01-02T00:00:00+00:00", "extra": 1,
        },
    )
    led = Ledger(tmp_path, keep_paths=True, features=("open", "close"))
    led.record([rec])
    t = led.read().to_pandas().sort_values("horizon_step")
    np.testing.assert_allclose(t.mean_close, mean[:, 3])
    np.testing.assert_allclose(t.mean_open, mean[:, 0])
    np.testing.assert_allclose(t["close_q0.9"], mean[:, 3] * 1.1)
    np.testing.assert_allclose(t["open_q0.1"], mean[:, 0] * 0.9)
    assert list(t.paths_close.iloc[0]) == [mean[0, 3], 2 * mean[0, 3]]
    assert (t.calibration_version == 2).all() and (t.calibration_hash == "beef").all()
    assert str(t.calibration_updated_at.iloc[0]) == "2026-01-02 00:00:00+00:00"
    with pytest.raises(ValueError, match="levels"):
        ForecastRecord(
            request_id="r", symbol="AAA", origin=START, timestamps=steps, mean=mean, quantiles=qs,
            model_sha256=SHA,
        )


def test_write_errors_are_os_errors(tmp_path):
    (tmp_path / "ledger").write_text("not a folder")
    with pytest.raises(OSError) as info:
        Ledger(tmp_path / "ledger").record([record("AAA", START, 2)])
    assert isinstance(info.value, LedgerWriteError) and info.value.errno is not None


def test_several_writers_at_once_never_collide(tmp_path):
    root = tmp_path / "ledger"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {sys.path!r}
        from ledger_helpers import record, START
        from kronos_core.ledger import Ledger
        led = Ledger({str(root)!r}, writer_id=sys.argv[1])
        for i in range(20):
            led.record([record("AAA", START, 4, request_id=f"{{sys.argv[1]}}-{{i}}")])
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, f"gw{k}"], cwd=os.path.dirname(__file__))
        for k in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    led = Ledger(root)
    assert len(led.files()) == 60
    t = led.read()
    assert t.num_rows == 240 and len(set(t["request_id"].to_pylist())) == 60 and led.skipped == []
