"""What a data engineer's trial of ``kronos import`` found (issue 42): another bar size merged
silently, zero and negative prices accepted, ``--exchange XSHE`` refused, zero volumes appended
to real ones, vendor symbols that could not be mapped, a line per symbol at INFO, non-UTF-8
files unreadable, a time-zone refusal without its fix. Each test failed before its fix."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.candles import CandleError
from kronos_core.cli import main
from kronos_core.data.calendars import LISTED_EXCHANGES, exchange_sessions
from kronos_core.data.importer import import_files
from kronos_core.data.store import KlineStore
from kronos_core.data.validate import Repairs, validate_candles

ROOT = Path(__file__).resolve().parents[2]


def _candles(stamps, base: float = 100.0, volume: bool = True) -> pd.DataFrame:
    n = len(stamps)
    px = base + np.arange(n) * 0.1
    df = pd.DataFrame({"timestamps": pd.DatetimeIndex(stamps).strftime("%Y-%m-%d %H:%M:%S"),
                       "open": px, "high": px + 1, "low": px - 1, "close": px + 0.5})
    if volume:
        df["volume"] = 1000.0
    return df


def _csv(tmp_path: Path, name: str, df: pd.DataFrame, **kw) -> Path:
    p = tmp_path / name
    df.to_csv(p, index=False, **kw)
    return p


@pytest.fixture
def daily_aapl(tmp_path) -> Path:
    root = tmp_path / "store"
    days = pd.bdate_range("2024-01-02", periods=30)
    f = _csv(tmp_path, "AAPL.csv", _candles(days))
    assert main(["import", str(f), "--store", str(root), "--no-progress"]) == 0
    return root


# -- finding 1: another bar size ---------------------------------------------------------------


@pytest.mark.parametrize("flags", [[], ["--frequency", "1d"]])
def test_minute_bars_into_a_daily_series_are_refused(daily_aapl, tmp_path, capsys, flags):
    minutes = pd.date_range("2024-02-14 09:30", periods=120, freq="1min")
    f = _csv(tmp_path, "AAPL_1min.csv", _candles(minutes))
    rc = main(["import", str(f), "--store", str(daily_aapl), "--symbol", "AAPL",
               "--no-progress", *flags])
    err = capsys.readouterr().err
    assert rc == 1
    assert "bars are 1min" in err and "1d" in err and "2024-02-14 09:31:00" in err
    assert len(KlineStore(daily_aapl).read("AAPL")) == 30


def test_daily_bars_under_a_minute_frequency_are_refused(tmp_path, capsys):
    f = _csv(tmp_path, "X.csv", _candles(pd.bdate_range("2024-01-02", periods=10)))
    rc = main(["import", str(f), "--store", str(tmp_path / "s"), "--frequency", "1min",
               "--no-progress"])
    assert rc == 1 and "bars are 1d" in capsys.readouterr().err


def test_daily_bars_across_weekends_and_holidays_still_append(daily_aapl, tmp_path):
    days = pd.DatetimeIndex(["2024-02-13", "2024-02-16", "2024-02-20"])  # a Monday holiday
    f = _csv(tmp_path, "AAPL.csv", _candles(days, 120))
    assert main(["import", str(f), "--store", str(daily_aapl), "--no-progress"]) == 0
    assert len(KlineStore(daily_aapl).read("AAPL")) == 33


# -- finding 2: non-positive prices ------------------------------------------------------------


def test_zero_and_negative_prices_are_refused_with_their_rows():
    df = _candles(pd.bdate_range("2024-01-02", periods=6))
    df.loc[1, "low"] = -1.0
    df.loc[3, ["open", "high", "low", "close"]] = 0.0
    with pytest.raises(CandleError) as exc:
        validate_candles(df, source="x.csv")
    msg = str(exc.value)
    assert "column 'low': zero or negative price in 2 rows 2, 4" in msg
    assert "--drop-nonpositive" in msg
    frame, _, report = validate_candles(df, repairs=Repairs(drop_nonpositive=True))
    assert len(frame) == 4 and (frame[["open", "high", "low", "close"]] > 0).all().all()
    assert any("dropped" in r for r in report.repairs)


def test_cli_refuses_a_zero_row_and_drops_it_on_request(tmp_path, capsys):
    df = _candles(pd.bdate_range("2024-01-02", periods=6))
    df.loc[2, ["open", "high", "low", "close", "volume"]] = 0.0
    f = _csv(tmp_path, "Z.csv", df)
    store = tmp_path / "s"
    assert main(["import", str(f), "--store", str(store), "--no-progress"]) == 1
    assert "row 3" in capsys.readouterr().err
    assert main(["import", str(f), "--store", str(store), "--no-progress",
                 "--drop-nonpositive"]) == 0
    assert len(KlineStore(store).read("Z")) == 5


# -- finding 4: every listed MIC ---------------------------------------------------------------


@pytest.mark.parametrize("mic", LISTED_EXCHANGES)
def test_every_listed_exchange_is_accepted(mic, tmp_path):
    assert exchange_sessions(mic).name == mic
    f = _csv(tmp_path, "X.csv", _candles(pd.bdate_range("2024-03-04", periods=5)))
    assert main(["import", str(f), "--store", str(tmp_path / "s"), "--exchange", mic,
                 "--no-progress"]) == 0
    assert KlineStore(tmp_path / "s").metadata("X")["exchange"] == mic


def test_the_listed_exchanges_are_the_ones_the_docs_and_messages_name(capsys):
    doc = (ROOT / "docs" / "store.md").read_text()
    assert all(f"`{mic}`" in doc for mic in LISTED_EXCHANGES)
    assert main(["import", "x.csv", "--store", "s", "--exchange", "NOPE"]) == 2
    err = capsys.readouterr().err
    assert all(mic in err for mic in LISTED_EXCHANGES)


def test_shenzhen_follows_the_shanghai_calendar():
    sz, sh = exchange_sessions("XSHE"), exchange_sessions("XSHG")
    assert np.array_equal(sz.day, sh.day) and np.array_equal(sz.break_start, sh.break_start)


# -- finding 5: missing volume, the amount hint ------------------------------------------------


def test_a_file_without_volume_is_refused_for_a_series_with_volumes(daily_aapl, tmp_path, capsys):
    days = pd.bdate_range("2024-02-13", periods=2)
    f = _csv(tmp_path, "AAPL.csv", _candles(days, 120, volume=False))
    assert main(["import", str(f), "--store", str(daily_aapl), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "no 'volume' column" in err and "--column volume=" in err
    assert len(KlineStore(daily_aapl).read("AAPL")) == 30
    # a new series without volume is still fine (the model's rule fills zeros)
    f = _csv(tmp_path, "NEWSYM.csv", _candles(days, 120, volume=False))
    assert main(["import", str(f), "--store", str(daily_aapl), "--no-progress"]) == 0


def test_an_amount_column_is_hinted_as_amount():
    df = _candles(pd.bdate_range("2024-01-02", periods=5), volume=False).assign(amt=5.0)
    _, _, report = validate_candles(df)
    (hint,) = report.warnings
    assert "--column amount='amt'" in hint and "volume=" not in hint


# -- finding 8: vendor symbols ---------------------------------------------------------------


def test_symbol_map_maps_vendor_symbols_in_every_import_form(tmp_path):
    days = pd.bdate_range("2024-01-02", periods=5)
    mapping = _csv(tmp_path, "map.csv", pd.DataFrame({"vendor": ["^GSPC", "BRK/B"],
                                                      "symbol": ["GSPC", "BRK.B"]}))
    store = tmp_path / "s"
    by_name = _csv(tmp_path, "^GSPC.csv", _candles(days))
    assert main(["import", str(by_name), "--store", str(store), "--symbol-map", str(mapping),
                 "--no-progress"]) == 0
    many = pd.concat([_candles(days).assign(ticker=t) for t in ("^GSPC", "BRK/B")])
    grouped = _csv(tmp_path, "many.csv", many.assign(close=many["close"] + 0.25))
    assert main(["import", str(grouped), "--store", str(store), "--symbol-column", "ticker",
                 "--symbol-map", str(mapping), "--no-progress", "--on-overlap", "replace"]) == 0
    assert KlineStore(store).symbols() == ["BRK.B", "GSPC"]


# -- finding 9: noise, rewrites ----------------------------------------------------------------


def test_one_info_line_per_import(tmp_path, caplog):
    days = pd.bdate_range("2024-01-02", periods=5)
    files = [_csv(tmp_path, f"S{i}.csv", _candles(days, volume=False)) for i in range(20)]
    with caplog.at_level(logging.INFO, logger="kronos_core"):
        out = import_files(files, tmp_path / "s", progress=False)
    assert all(o.ok for o in out)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(info) == 1 and "20 symbol(s) changed" in info[0], info


def test_identical_reimport_rewrites_no_file(daily_aapl, tmp_path):
    files = sorted(p for p in daily_aapl.rglob("*.arrow"))
    stamps = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in files]
    f = tmp_path / "AAPL.csv"
    assert main(["import", str(f), "--store", str(daily_aapl), "--no-progress"]) == 0
    assert sorted(p for p in daily_aapl.rglob("*.arrow")) == files
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in files] == stamps


# -- finding 10: encoding, time-zone hint ------------------------------------------------------


def test_a_gbk_file_reads_with_encoding(tmp_path, capsys):
    df = _candles(pd.bdate_range("2024-01-02", periods=5)).rename(columns={"volume": "成交量"})
    f = _csv(tmp_path, "CN.csv", df, encoding="gbk")
    store = str(tmp_path / "s")
    assert main(["import", str(f), "--store", store, "--no-progress"]) == 1
    assert "--encoding" in capsys.readouterr().err
    assert main(["import", str(f), "--store", store, "--no-progress", "--encoding", "gbk",
                 "--column", "volume=成交量"]) == 0
    assert KlineStore(store).read("CN")["volume"].eq(1000.0).all()


def test_time_zone_refusal_names_the_flag(tmp_path, capsys):
    days = pd.bdate_range("2024-01-02", periods=5)
    f = _csv(tmp_path, "X.csv", _candles(days))
    store = str(tmp_path / "s")
    assert main(["import", str(f), "--store", store, "--timezone", "America/New_York",
                 "--no-progress"]) == 0
    f2 = _csv(tmp_path, "X.csv", _candles(pd.bdate_range("2024-01-09", periods=3)))
    assert main(["import", str(f2), "--store", store, "--timezone", "UTC", "--no-progress"]) == 1
    assert "--timezone America/New_York" in capsys.readouterr().err
