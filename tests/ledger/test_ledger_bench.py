"""The ledger benchmark runs and reports its figures (small sizes here)."""

from __future__ import annotations

from kronos_core.ledger.bench import main, run


def test_bench_reports_disk_and_time(capsys):
    out = run(n_symbols=20, horizon=6, repeats=2)
    assert out["rows_per_request"] == 120 and out["rows_read"] == 240
    assert out["bytes_per_1000_forecasts"] > 0 and out["record_s_median"] > 0
    assert main(["--symbols", "5", "--horizon", "3", "--repeats", "1"]) == 0
    assert "bytes_per_1000_forecasts" in capsys.readouterr().out
