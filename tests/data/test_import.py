"""Import: validation with row numbers, explicit repairs, appends, the ``kronos import`` CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from data_helpers import REAL_FILES, real_path

from kronos_core.base.candles import FEATURES, CandleError
from kronos_core.cli import main
from kronos_core.data.importer import import_files
from kronos_core.data.store import KlineStore
from kronos_core.data.validate import Repairs, validate_candles


def _goog(real_frames, n=20):
    return real_frames["goog_daily.csv"].head(n).copy()


def test_real_files_validate_clean(real_frames):
    for name, df in real_frames.items():
        frame, tz, report = validate_candles(df, source=name)
        assert len(frame) == len(df) and tz is None and report.repairs == []
        assert list(frame.columns) == ["timestamps", *FEATURES]


def test_nan_reported_with_rows_and_column(real_frames):
    df = _goog(real_frames)
    df.loc[4, "close"] = np.nan
    df.loc[9, "close"] = np.nan
    df.loc[6, "volume"] = np.nan
    with pytest.raises(CandleError) as exc:
        validate_candles(df, source="goog.csv")
    msg = str(exc.value)
    assert "column 'close'" in msg and "rows 5, 10" in msg  # 1-based data rows
    assert "column 'volume'" in msg and "row 7" in msg
    frame, _, report = validate_candles(df, repairs=Repairs(drop_nan=True))
    assert len(frame) == 17 and len(report.repairs) == 2


def test_text_and_bad_time(real_frames):
    df = _goog(real_frames).astype({"open": object, "timestamps": object})
    df.loc[2, "open"] = "n/a"
    df.loc[3, "timestamps"] = "not a date"
    with pytest.raises(CandleError) as exc:
        validate_candles(df)
    assert "column 'open': non-numeric" in str(exc.value) and "row 3" in str(exc.value)
    assert "column 'timestamps'" in str(exc.value) and "row 4" in str(exc.value)


def test_duplicates_and_unsorted(real_frames):
    df = _goog(real_frames)
    dup = pd.concat([df, df.iloc[[5]]], ignore_index=True)  # row 21 repeats row 6's time
    with pytest.raises(CandleError) as exc:
        validate_candles(dup)
    assert "not sorted" in str(exc.value) and "row 21" in str(exc.value)
    assert "duplicate timestamps in 2 rows 6, 21" in str(exc.value)
    frame, _, _ = validate_candles(dup, repairs=Repairs(sort=True, drop_duplicates=True))
    assert len(frame) == 20 and frame["timestamps"].is_monotonic_increasing


def test_high_low_and_negative_volume(real_frames):
    df = _goog(real_frames)
    df.loc[2, "high"] = df.loc[2, "open"] - 1  # high below open
    df.loc[7, "low"] = df.loc[7, "close"] + 1  # low above close
    df.loc[11, "volume"] = -5
    with pytest.raises(CandleError) as exc:
        validate_candles(df)
    msg = str(exc.value)
    assert "column 'high'" in msg and "row 3" in msg
    assert "column 'low'" in msg and "row 8" in msg
    assert "column 'volume': negative value in 1 row 12" in msg
    frame, _, report = validate_candles(df, repairs=Repairs.all())
    assert len(report.repairs) == 3
    assert (frame["high"] >= frame[["open", "close", "low"]].max(axis=1)).all()
    assert (frame["low"] <= frame[["open", "close"]].min(axis=1)).all()
    assert frame.loc[11, "volume"] == 0


def test_missing_columns_and_model_rules(real_frames):
    df = _goog(real_frames)
    with pytest.raises(CandleError, match=r"required column\(s\) \['close'\] missing"):
        validate_candles(df.drop(columns=["close"]))
    with pytest.raises(CandleError, match="no time column"):
        validate_candles(df.drop(columns=["timestamps"]))
    no_volume, _, report = validate_candles(df.drop(columns=["volume"]))
    assert (no_volume["volume"] == 0).all() and (no_volume["amount"] == 0).all() and report.notes
    with_volume, _, _ = validate_candles(df)
    np.testing.assert_allclose(
        with_volume["amount"], df["volume"] * df[["open", "high", "low", "close"]].mean(axis=1)
    )


def test_tz_aware_input_kept_as_wall_clock(real_frames):
    df = _goog(real_frames, 5)
    df["timestamps"] = pd.to_datetime(df["timestamps"]).dt.tz_localize("UTC")
    frame, tz, _ = validate_candles(df, timezone="America/New_York")
    assert tz == "America/New_York"
    assert frame["timestamps"].iloc[0] == pd.Timestamp(
        "2004-08-18 20:00"
    )  # 00:00 UTC, EDT wall clock


def test_cli_import_real_files_and_append(tmp_path, capsys, synthetic_cn_5min):
    store = tmp_path / "store"
    intraday = tmp_path / "cn_5min.csv"  # a 5-minute file with amount (synthetic, Shanghai-style)
    synthetic_cn_5min.to_csv(intraday, index=False)
    files = [*(str(real_path(n)) for n in REAL_FILES), str(intraday)]
    assert main(["import", *files, "--store", str(store), "--no-progress"]) == 0
    st = KlineStore(store)
    # file names become upper-case symbols (the store's case rule), and the import says so
    assert st.symbols() == ["CN_5MIN", "EURUSD_HOURLY", "GOOG_DAILY", "SP500_DAILY"]
    assert st.metadata("CN_5MIN")["frequency"] == "5min"
    assert st.metadata("EURUSD_HOURLY")["frequency"] == "1h"
    assert "4 file(s), 4 symbol(s) changed" in capsys.readouterr().out

    # append: first half, then the whole file (overlap identical) -> history kept, no duplicates
    df = pd.read_csv(intraday)
    half = tmp_path / "half.csv"
    df.iloc[:1200].to_csv(half, index=False)
    assert (
        main(
            [
                "import",
                str(half),
                "--store",
                str(store),
                "--symbol",
                "A",
                "--timezone",
                "Asia/Shanghai",
            ]
        )
        == 0
    )
    assert KlineStore(store).metadata("A")["rows"] == 1200
    assert main(["import", str(intraday), "--store", str(store), "--symbol", "A"]) == 0
    meta = KlineStore(store).metadata("A")
    assert meta["rows"] == 2500 and meta["timezone"] == "Asia/Shanghai"

    fx = str(real_path("eurusd_hourly.csv"))
    args = ["import", fx, "--store", str(store), "--symbol", "FX", "--timezone", "UTC"]
    assert main([*args, "--session-timezone", "America/New_York", "--source", "backtesting"]) == 0
    meta = KlineStore(store).metadata("FX")
    assert (meta["timezone"], meta["session_timezone"], meta["source"]) == (
        "UTC",
        "America/New_York",
        "backtesting",
    )


def test_cli_refuses_bad_file_with_rows_then_repairs(tmp_path, capsys):
    df = pd.read_csv(real_path("goog_daily.csv")).head(50)
    df.loc[10, "low"] = df.loc[10, "high"] + 1
    bad = tmp_path / "BAD.csv"
    df.to_csv(bad, index=False)
    store = tmp_path / "store"
    assert main(["import", str(bad), "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert "column 'high'" in err and "row 11" in err and "--fix-high-low" in err
    assert KlineStore(store).symbols() == []  # refused: nothing written
    assert main(["import", str(bad), "--store", str(store), "--fix-high-low"]) == 0
    assert KlineStore(store).metadata("BAD")["rows"] == 50


def test_symbol_column_and_parquet(tmp_path):
    parts = []
    for name, sym in (("goog_daily.csv", "GOOG"), ("sp500_daily.csv", "SPX")):
        d = pd.read_csv(real_path(name)).head(300)
        d["ticker"] = sym
        parts.append(d)
    combined = pd.concat(parts, ignore_index=True)
    combined.loc[305, "close"] = np.nan  # SPX's 6th row, the file's row 306
    combined["timestamps"] = pd.to_datetime(combined["timestamps"])
    pq = tmp_path / "universe.parquet"
    combined.to_parquet(pq)
    outcomes = import_files([pq], tmp_path / "store", symbol_column="ticker", progress=False)
    by = {o.symbol: o for o in outcomes}
    assert by["GOOG"].ok and by["GOOG"].rows_total == 300
    assert not by["SPX"].ok and "row 306" in by["SPX"].error  # the file's row, not the group's
    outcomes = import_files(
        [pq],
        tmp_path / "store",
        symbol_column="ticker",
        repairs=Repairs(drop_nan=True),
        progress=False,
    )
    assert all(o.ok for o in outcomes)
    assert KlineStore(tmp_path / "store").metadata("SPX")["rows"] == 299


def test_import_many_files_progress_and_invalid_names(tmp_path):
    src = pd.read_csv(real_path("goog_daily.csv")).head(30)
    files = []
    for i in range(5):
        p = tmp_path / f"S{i}.csv"
        src.to_csv(p, index=False)
        files.append(p)
    bad_name = tmp_path / "bad name.csv"
    src.to_csv(bad_name, index=False)
    every = [*files, bad_name, tmp_path / "missing.csv"]
    outcomes = import_files(every, tmp_path / "store", progress=True)
    assert [o.ok for o in outcomes] == [True] * 5 + [False, False]
    assert "invalid symbol" in outcomes[5].error and "cannot read" in outcomes[6].error
    assert KlineStore(tmp_path / "store").symbols() == []  # all-or-nothing: none published
    outcomes = import_files(every, tmp_path / "store", progress=True, partial=True)
    assert [o.ok for o in outcomes] == [True] * 5 + [False, False]
    assert KlineStore(tmp_path / "store").symbols() == [f"S{i}" for i in range(5)]


def test_cli_import_exchange_flag_tags_the_metadata(tmp_path, capsys):
    store = tmp_path / "store"
    goog = str(real_path("goog_daily.csv"))
    assert main(["import", goog, "--store", str(store), "--exchange", "xnas", "--no-progress"]) == 0
    assert KlineStore(store).metadata("GOOG_DAILY")["exchange"] == "XNAS"
    assert main(["import", goog, "--store", str(store), "--exchange", "NOPE", "--no-progress"]) == 2
    assert "unknown exchange 'NOPE'" in capsys.readouterr().err
