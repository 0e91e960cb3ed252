"""A gateway process killed in the middle of a ledger append (SIGKILL: no clean-up) loses
only the rows of the request in flight; every earlier request's rows still read, and the
half-written file is invisible to readers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kronos_core.ledger.ledger import Ledger

CHILD = textwrap.dedent("""
    import asyncio, os, sys, time
    sys.path.insert(0, {tests!r})
    from service_fakes import fake_gateway
    import kronos_core.ledger.ledger as ledger_mod
    from kronos_core.ledger.ledger import Ledger
    from service.gateway.record import LedgerRecorder
    from service.common.schemas import ForecastRequest

    root, marker = {root!r}, {marker!r}
    gw, m, _ = fake_gateway()
    gw.recorder = LedgerRecorder(lambda: Ledger(root, writer_id="gw-doomed"), m)

    def ask(symbols):
        out = asyncio.run(gw.forecast(ForecastRequest(symbols=symbols, horizon=4, lookback=16,
                                                      quantiles=[0.1, 0.5, 0.9])))
        gw.record(out)

    for i in range(3):
        ask([f"S00{{i}}", f"S01{{i}}"])
    assert gw.recorder.flush()

    def stuck_replace(src, dst):  # the 4th file is written in full, then the process dies before its rename
        open(marker, "w").write(str(src))
        time.sleep(120)

    ledger_mod.os.replace = stuck_replace
    ask(["S005", "S006", "S007"])
    time.sleep(120)
""")  # noqa: E501


def test_killed_mid_append_loses_only_the_request_in_flight(tmp_path: Path):
    root, marker = tmp_path / "ledger", tmp_path / "in-append"
    tests = str(Path(__file__).parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=tests, root=str(root), marker=str(marker))],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the child never reached its 4th append"
            time.sleep(0.05)
        # mid-append: its temporary file is complete, not renamed
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    half = Path(marker.read_text())
    assert half.exists() and half.name.startswith(".")  # what the kill left behind
    ledger = Ledger(root)
    rows = ledger.read()
    assert ledger.skipped == []  # nothing unreadable: the half-written file is not a ledger file
    assert rows.num_rows == 3 * 2 * 4  # 3 requests x 2 symbols x 4 steps: every earlier row
    assert sorted(set(rows["symbol"].to_pylist())) == [
        "S000", "S001", "S002", "S010", "S011", "S012",
    ]
    assert len(set(rows["request_id"].to_pylist())) == 3
