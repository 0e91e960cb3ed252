"""``kronos eval`` on one's own store (issue 44): ``--data STORE/5min`` reads that frequency
folder, the report takes market and frequency from the store's metadata, and ``--eval-from``
(one date, or a CSV of symbol,eval_from) splits each series as the corpus does: evaluation
windows at or after it, ``kronos calibrate`` windows before it."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from fixture_paths import TINY

from kronos_core.cli import main
from tests.data.crypto_helpers import crypto_frame

WINDOW = ["--lookback", "48", "--horizon", "2", "--windows", "3", "--sample-count", "4",
          "--model", TINY, "--device", "cpu"]


@pytest.fixture()
def store(tmp_path):
    root = tmp_path / "store"
    for i, sym in enumerate(("ADA-BTC", "ETH-BTC")):
        csv = tmp_path / f"{sym}.csv"
        crypto_frame(start="2018-01-15 00:00", days=9, seed=i).to_csv(csv, index=False)
        assert main(["import", str(csv), "--store", str(root), "--market", "crypto",
                     "--no-progress"]) == 0
    return root


def test_eval_of_a_store_frequency_folder_from_a_date(store, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["eval", "--data", str(store / "5min"), "--eval-from", "2018-01-22 00:00",
                 *WINDOW, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    entries = {e["name"]: e for e in report["data"]["series"]}
    assert set(entries) == {"ADA-BTC", "ETH-BTC"}
    for e in entries.values():
        assert (e["market"], e["frequency"], e["holdout"]) == ("crypto", "5min", "time")
        assert pd.Timestamp(e["eval_from"]) == pd.Timestamp("2018-01-22")
    assert "| crypto | 5min |" in capsys.readouterr().out  # the grouped table names them


def test_eval_from_a_csv_per_symbol_and_calibrate_before_it(store, tmp_path, capsys):
    dates = tmp_path / "eval_from.csv"
    dates.write_text("symbol,eval_from\nADA-BTC,2018-01-21 00:00\nETH-BTC,2018-01-22 12:00\n")
    out = tmp_path / "report.json"
    assert main(["eval", "--data", str(store / "5min"), "--eval-from", str(dates), *WINDOW,
                 "--out", str(out)]) == 0
    entries = {e["name"]: e for e in json.loads(out.read_text())["data"]["series"]}
    assert pd.Timestamp(entries["ETH-BTC"]["eval_from"]) == pd.Timestamp("2018-01-22 12:00")
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--data", str(store / "5min"), "--eval-from", str(dates),
                 *WINDOW, "--windows", "5", "--out", str(cal)]) == 0
    info = json.loads(cal.read_text())
    assert "eval_from" in json.dumps(info)  # fitted on windows before each series' date
    capsys.readouterr()
    dates.write_text("symbol,eval_from\nADA-BTC,2018-01-21\n")
    assert main(["eval", "--data", str(store / "5min"), "--eval-from", str(dates), *WINDOW]) == 2
    assert "no row for ['ETH-BTC']" in capsys.readouterr().err


def test_a_store_folder_without_series_names_what_it_holds(tmp_path, store, capsys):
    (store / "1h").mkdir()
    assert main(["eval", "--data", str(store / "1h"), *WINDOW]) == 2
    err = capsys.readouterr().err
    assert "frequency folder 1h" in err and "5min" in err
