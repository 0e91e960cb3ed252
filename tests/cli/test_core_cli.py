"""The ``kronos`` entry point: forecast and bench subcommands, run as a user would."""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
from fixture_paths import SHARED_A_SHARE, shared_path

from kronos_core.cli import main
from kronos_core.data.sample_store import REAL_DIR

DATA = REAL_DIR


def _forecast_csv(csv, out, horizon: int) -> pd.DataFrame:
    code = main([
        "forecast", "--csv", str(csv), "--horizon", str(horizon), "--samples", "3",
        "--seed", "4", "--quantiles", "0.1,0.9", "--lookback", "100", "--out", str(out),
    ])
    assert code == 0
    return pd.read_csv(out, parse_dates=["timestamps"])


def test_forecast_writes_csv_with_quantiles(tmp_path, capsys):
    table = _forecast_csv(DATA / "eurusd_hourly.csv", tmp_path / "f.csv", 5)
    assert len(table) == 5
    assert {"open", "close", "volume", "amount", "close_q0.1", "close_q0.9"} <= set(table.columns)
    assert (table["close_q0.1"] <= table["close_q0.9"]).all()
    # future timestamps follow the file's own sessions: the FX week closes on Friday evening
    # (2018-02-07 15:00 is the last stamp: hourly steps on, Wednesday)
    assert list(table["timestamps"]) == list(pd.date_range("2018-02-07 16:00", periods=5, freq="h"))
    assert "wrote 5 forecast candles" in capsys.readouterr().out


def test_forecast_future_stamps_skip_the_a_share_lunch_break(tmp_path):
    """A real exchange with a lunch break (the A-share file of the shared folder)."""
    table = _forecast_csv(shared_path(SHARED_A_SHARE), tmp_path / "f.csv", 30)
    assert len(table) == 30 and pd.Series(table["timestamps"]).is_monotonic_increasing
    # 5-minute steps, never inside the lunch break nor outside 09:30-15:00
    minutes = table["timestamps"].dt.hour * 60 + table["timestamps"].dt.minute
    assert not ((minutes > 11 * 60 + 30) & (minutes <= 13 * 60)).any()
    assert ((minutes > 9 * 60 + 30) & (minutes <= 15 * 60)).all()


def test_forecast_with_checkpoint_folders_prints(fixture_dir, tmp_path):
    csv = tmp_path / "in.csv"
    pd.read_csv(DATA / "goog_daily.csv").tail(80).to_csv(csv, index=False)
    proc = subprocess.run(
        [shutil.which("kronos") or "kronos", "forecast", "--model", str(fixture_dir / "model"),
         "--tokenizer", str(fixture_dir / "tokenizer"), "--csv", str(csv), "--horizon", "3",
         "--top-k", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[0].split()[:6] == ["open", "high", "low", "close", "volume", "amount"]
    assert len(lines) == 2 + 3  # header, index name, 3 candles


def test_forecast_reports_bad_input(tmp_path, capsys):
    csv = tmp_path / "bad.csv"
    csv.write_text("timestamps,open,high,low,close\n2024-01-01,1,2,0.5,\n2024-01-02,1,2,0.5,1.5\n")
    assert main(["forecast", "--csv", str(csv), "--horizon", "2"]) == 2
    assert "NaN" in capsys.readouterr().err
    assert main(["forecast", "--csv", str(tmp_path / "missing.csv"), "--horizon", "2"]) == 2
    assert main(["forecast", "--csv", str(DATA / "goog_daily.csv"), "--horizon", "2", "--model",
                 str(tmp_path)]) == 2


def test_bench_runs_and_checks_identity(tmp_path, capsys):
    """A miniature ``kronos bench`` (the real workload takes minutes): both algorithms, same
    forecast."""
    out = tmp_path / "bench.json"
    code = main(["bench", "--series", "2", "--lookback", "24", "--horizon", "3", "--skip-sliding",
                 "--skip-memory", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "(a) full recompute" in text and "(b) cached engine" in text
    figures = json.loads(out.read_text())
    assert figures["fits_context"]["identical"] is True
    assert figures["fits_context"]["ratio"] > 0
    assert figures["fits_context"]["cached"]["peak_bytes"] > 0
    monitor = json.loads((tmp_path / "bench.monitor.json").read_text())  # the run's resource report
    assert monitor["summary"]["steps"] >= 1 and monitor["summary"]["samples"] >= 2
    assert monitor["summary"]["rss_bytes_peak"] > 0 and monitor["timeseries"]
    assert "resource report written to" in text
