"""One candle reader for ``kronos import`` and ``kronos forecast``: flags, any-case columns,
column mapping, unused-column warnings, every problem in one pass, each message once."""

from __future__ import annotations

import argparse
import logging
import zipfile

import numpy as np
import pandas as pd
import pytest
from data_helpers import real_path

from kronos_core.base.candles import CandleError
from kronos_core.cli import main
from kronos_core.cli.forecast import add_arguments as forecast_arguments
from kronos_core.cli.forecast import read_input
from kronos_core.data import reader
from kronos_core.data.reader import ReadOptions, read_candles, write_table
from kronos_core.data.store import KlineStore
from kronos_core.data.validate import Repairs


def _goog(n=30) -> pd.DataFrame:
    return pd.read_csv(real_path("goog_daily.csv")).head(n)


def _vendor_csv(tmp_path, n=30):
    """GOOG rows as a vendor writes them: Date/Open/... and volume under 'Vol'."""
    df = _goog(n).rename(
        columns={
            "timestamps": "Date", "open": "Open", "high": "High", "low": "Low", "close": "Close",
            "volume": "Vol",
        }
    )
    path = tmp_path / "vendor.csv"
    df.to_csv(path, index=False)
    return path, df


def _damaged_csv(tmp_path):
    """Three kinds of problem in one file, at data rows 5 (NaN close), 10 (earlier than the
    row before) and 12 (high below open)."""
    df = _goog()
    df.loc[4, "close"] = np.nan
    df.loc[9, "timestamps"] = "2004-08-01"
    df.loc[11, "high"] = df.loc[11, "open"] - 1
    path = tmp_path / "bad.csv"
    df.to_csv(path, index=False)
    return path


def _forecast_args(*argv):
    parser = argparse.ArgumentParser()
    forecast_arguments(parser)
    return parser.parse_args(["--horizon", "2", *argv])


def test_any_case_columns_mapping_and_unused_warning(tmp_path, caplog):
    path, df = _vendor_csv(tmp_path)
    with caplog.at_level(logging.WARNING, logger="kronos_core.data.reader"):
        frame, _, report = read_candles(path)
    assert (frame["volume"] == 0).all()  # no 'volume' column: the model's rule
    assert report.warnings == [
        "column 'Vol' is not used (if it holds the volume, map it with --column volume='Vol')"]
    assert [r.getMessage() for r in caplog.records].count(f"{path}: {report.warnings[0]}") == 1
    frame, _, report = read_candles(path, ReadOptions(column_map={"volume": "Vol"}))
    np.testing.assert_array_equal(frame["volume"], df["Vol"].to_numpy(float))
    assert report.warnings == []
    with pytest.raises(CandleError, match="--column volume=Nope: no column 'Nope'"):
        read_candles(path, ReadOptions(column_map={"volume": "Nope"}))
    with pytest.raises(CandleError, match="use NAME=COLUMN"):
        reader.parse_column_map(["vol"])


def test_every_problem_in_one_error_with_data_row_numbers(tmp_path):
    path = _damaged_csv(tmp_path)
    with pytest.raises(CandleError) as exc:
        read_candles(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and msg.count(str(path)) == 1
    assert "column 'close': NaN/missing or infinite value in 1 row 5 (--drop-nan" in msg
    assert "timestamps not sorted, earlier than the row before in 1 row 10 (--sort" in msg
    assert "column 'high': high below open/close/low in 1 row 12 (--fix-high-low" in msg
    frame, _, report = read_candles(path, ReadOptions(repairs=Repairs.all()))
    assert (
        len(frame) == 29
        and frame["timestamps"].is_monotonic_increasing
        and len(report.repairs) == 3
    )


def test_forecast_reads_through_the_same_reader(tmp_path):
    """The same file gives ``kronos forecast`` the same message (same row numbers)."""
    path = _damaged_csv(tmp_path)
    with pytest.raises(CandleError) as exc_forecast:
        read_input(_forecast_args("--csv", str(path)))
    with pytest.raises(CandleError) as exc_reader:
        read_candles(path)
    assert str(exc_forecast.value) == str(exc_reader.value)
    vendor, df = _vendor_csv(tmp_path)
    values, stamps = read_input(_forecast_args("--csv", str(vendor), "--column", "volume=Vol"))
    assert values.shape == (30, 6) and values[:, 4].tolist() == df["Vol"].astype("float32").tolist()
    assert stamps[0] == pd.Timestamp(df["Date"].iloc[0])
    # the old flag spelling still works
    values, _ = read_input(_forecast_args("--csv", str(vendor), "--timestamp-column", "DATE"))
    assert len(values) == 30


def test_import_numbers_rows_like_forecast_and_says_each_message_once(tmp_path, capsys, caplog):
    path = _damaged_csv(tmp_path)
    with caplog.at_level(logging.INFO):
        code = main(["import", str(path), "--store", str(tmp_path / "s"), "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert err.count("row 5") == 1 and "row 5" not in logged  # printed once, not also logged
    # no doubled prefix; import names the symbol in upper case (one case rule, issue 26)
    assert err.count(f"{path} [BAD]:") == 1 and f"{path} [BAD]: {path}" not in err
    assert "row 10" in err and "row 12" in err
    assert main(["import", str(path), "--store", str(tmp_path / "s"), "--no-progress", "--sort",
                 "--drop-nan", "--fix-high-low"]) == 0
    assert KlineStore(tmp_path / "s").metadata("BAD")["rows"] == 29


def test_import_any_case_and_column_flag(tmp_path):
    path, df = _vendor_csv(tmp_path)
    assert main(["import", str(path), "--store", str(tmp_path / "s"), "--no-progress",
                 "--column", "volume=VOL", "--time-column", "date"]) == 0
    stored = KlineStore(tmp_path / "s").read("VENDOR")  # import upper-cases symbols
    np.testing.assert_array_equal(stored["volume"].to_numpy(), df["Vol"].to_numpy(float))


def test_xlsx_output_is_real_or_refused(tmp_path, monkeypatch):
    table = pd.DataFrame(
        {"close": [1.0, 2.0]},
        index=pd.Index(pd.to_datetime(["2024-01-02", "2024-01-03"]), name="timestamps"),
    )
    out = tmp_path / "f.xlsx"
    write_table(table, out)
    assert zipfile.is_zipfile(out)  # an Excel workbook, not CSV text
    back = pd.read_excel(out, index_col=0)
    assert back["close"].tolist() == [1.0, 2.0]
    monkeypatch.setattr(reader, "_has_openpyxl", lambda: False)
    with pytest.raises(CandleError, match="needs openpyxl"):
        write_table(table, tmp_path / "g.xlsx")
    assert not (tmp_path / "g.xlsx").exists()
    with pytest.raises(CandleError, match="unknown file type '.txt'"):
        write_table(table, tmp_path / "f.txt")


def test_forecast_refuses_bad_out_and_unsorted_input_before_loading_a_model(tmp_path, capsys):
    unsorted = tmp_path / "u.csv"
    _goog().iloc[::-1].to_csv(unsorted, index=False)
    assert main(["forecast", "--csv", str(unsorted), "--horizon", "2"]) == 2
    err = capsys.readouterr().err
    assert "timestamps not sorted" in err and "--sort sorts them" in err and "Traceback" not in err
    assert (
        main(
            ["forecast", "--csv", str(unsorted), "--horizon", "2", "--out", str(tmp_path / "x.doc")]
        )
        == 2
    )
    assert "unknown file type '.doc'" in capsys.readouterr().err
    assert main(["forecast", "--csv", str(unsorted), "--horizon", "2", "--exchange", "NOPE"]) == 2
    assert "unknown exchange 'NOPE'" in capsys.readouterr().err
