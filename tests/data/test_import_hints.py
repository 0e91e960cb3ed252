"""What ``kronos import`` (and the reader behind it and ``kronos forecast``) makes of a new
user's files (issue 26): an all-null optional column is a missing one, gaps against the
exchange's sessions are warned about, a Yahoo file's adjusted close gets the right hint, and
symbols follow one case rule with a "did you mean" on lookup."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from data_helpers import real_path

from kronos_core.cli import main
from kronos_core.data.store import KlineStore
from kronos_core.data.validate import validate_candles


def _goog(n: int = 300) -> pd.DataFrame:
    return pd.read_csv(real_path("goog_daily.csv")).head(n)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_all_null_amount_column_is_imported_as_absent(tmp_path, capsys, suffix):
    df = _goog().assign(amount=np.nan)
    path = tmp_path / f"X{suffix}"
    if suffix == ".csv":
        df.to_csv(path, index=False)  # an empty column
    else:
        nulls = pd.Series([None] * len(df), dtype=object)
        df.assign(amount=nulls).to_parquet(path)  # a null-typed column
    store = tmp_path / "store"
    code = main(["import", str(path), "--store", str(store), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    without = tmp_path / "Y.csv"
    _goog().to_csv(without, index=False)
    assert main(["import", str(without), "--store", str(store), "--no-progress"]) == 0
    st = KlineStore(store)
    # exactly as when the column is missing
    np.testing.assert_array_equal(st.read("X").to_numpy(), st.read("Y").to_numpy())
    # a column with some values keeps its nulls as errors, row by row
    part = _goog(10).assign(amount=[1.0] * 9 + [np.nan])
    with pytest.raises(ValueError, match=r"column 'amount'.*row 10"):
        validate_candles(part)


def test_the_yahoo_adjusted_close_hint():
    df = _goog(20).rename(columns=str.title).rename(columns={"Timestamps": "Date"})
    df.insert(5, "Adj Close", df["Close"] * 0.98)
    _, _, report = validate_candles(df)
    (hint,) = report.warnings
    assert "--column close='Adj Close'" in hint
    assert "adjusted prices are usually what a model should see" in hint
    assert "volume" not in hint
    _, _, report = validate_candles(_goog(20).assign(turnover=1.0))
    assert report.warnings == ["column 'turnover' is not used (if it holds the amount, map it with "
                               "--column amount='turnover')"]


def _drop_sessions(n_drop: int) -> tuple[pd.DataFrame, list[str]]:
    df = _goog(400)
    gone = list(range(100, 100 + n_drop))
    first = [str(pd.Timestamp(t).date()) for t in df["timestamps"].iloc[gone[:5]]]
    return df.drop(index=gone), first


def test_missing_sessions_are_counted_against_the_exchange():
    from kronos_core.data.gaps import missing_sessions

    df, first = _drop_sessions(14)
    gaps = missing_sessions(pd.to_datetime(df["timestamps"]).to_numpy(), "XNAS")
    assert (gaps.count, gaps.sessions, gaps.first) == (14, 400, tuple(first))
    assert missing_sessions(pd.to_datetime(_goog(400)["timestamps"]).to_numpy(), "XNAS") is None
    weekly = pd.date_range("2010-01-04", periods=50, freq="W-MON")
    assert missing_sessions(weekly.to_numpy(), "XNYS") is None  # bars longer than a day: unchecked


def test_import_warns_about_missing_sessions_where_the_exchange_is_known(tmp_path, caplog):
    df, first = _drop_sessions(14)
    path = tmp_path / "GOOG.csv"
    df.to_csv(path, index=False)
    store = str(tmp_path / "store")
    with caplog.at_level("WARNING"):
        argv = ["import", str(path), "--store", store, "--exchange", "XNAS", "--no-progress"]
        assert main(argv) == 0
    text = caplog.text
    assert "missing sessions: 14 of the 400 XNAS sessions" in text and ", ".join(first) in text
    caplog.clear()
    with caplog.at_level("WARNING"):  # no exchange: nothing to compare with
        assert main(["import", str(path), "--store", str(tmp_path / "other"), "--no-progress"]) == 0
    assert "missing sessions" not in caplog.text


def test_symbols_are_upper_case_and_a_lookup_in_another_case_gets_a_hint(tmp_path, caplog):
    path = tmp_path / "aapl.csv"
    _goog(50).to_csv(path, index=False)
    store = tmp_path / "store"
    with caplog.at_level("WARNING"):
        assert main(["import", str(path), "--store", str(store), "--no-progress"]) == 0
    assert "symbol 'aapl' stored as 'AAPL'" in caplog.text
    st = KlineStore(store)
    assert st.symbols() == ["AAPL"]
    batch = st.read_windows(["aapl", "AAPL"], 10)
    assert batch.symbols == ["AAPL"]
    (err,) = batch.errors
    assert err.code == "unknown_symbol" and "did you mean 'AAPL'?" in err.message
    batch = st.read_windows(["aapl"], 10, frequency="1d")
    assert "did you mean 'AAPL'?" in batch.errors[0].message
    assert "did you mean" not in st.read_windows(["MSFT"], 10).errors[0].message
