"""What an A-share desk's evening found in ``kronos import`` (issue 52): two warnings for every
file of a 945-file folder (an unused ``symbol`` column hinted at as a price; ordinary trading
suspensions as missing sessions), a knock-on "--fix-high-low" complaint after a negative close,
summaries that counted a symbol once per file and did not say that valid files were held back,
and a ``.SH``/``.SZ`` folder that needed two commands. Each test failed before its fix."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.candles import CandleError
from kronos_core.cli import main
from kronos_core.data.calendars import exchange_sessions
from kronos_core.data.importer import import_files
from kronos_core.data.store import KlineStore
from kronos_core.data.symbol_exchange import exchange_from_symbol, parse_suffix_overrides
from kronos_core.data.timestamps import calendar_of, future_timestamps
from kronos_core.data.validate import Repairs, validate_candles

# XSHG sessions around China's National Day week: 2024-09-30 is the last session before it,
# 2024-10-08 the first after
SESSIONS = pd.DatetimeIndex(["2024-09-23", "2024-09-24", "2024-09-25", "2024-09-26",
                             "2024-09-27", "2024-09-30"])


def _rows(symbol: str, days: pd.DatetimeIndex, base: float = 10.0) -> pd.DataFrame:
    px = base + np.arange(len(days)) * 0.01
    return pd.DataFrame({"symbol": symbol, "date": days.strftime("%Y-%m-%d"), "open": px,
                         "high": px + 0.1, "low": px - 0.1, "close": px + 0.05,
                         "volume": 1e5, "amount": 1e6})


def _a_share_folder(folder: Path, n: int) -> list[Path]:
    """``n`` single-symbol vendor files, alternating .SH and .SZ, each with its own ``symbol``
    column; every third stock was suspended on 09-25 (a session with no candle)."""
    folder.mkdir()
    files = []
    for i in range(n):
        sym = f"{600000 + i}.SH" if i % 2 == 0 else f"{i:06d}.SZ"
        days = SESSIONS.delete(2) if i % 3 == 0 else SESSIONS
        path = folder / f"{sym}.csv"
        _rows(sym, days, 5 + i % 50).to_csv(path, index=False)
        files.append(path)
    return files


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("n", [30, pytest.param(900, marks=pytest.mark.slow)])
def test_a_folder_of_single_symbol_files_gets_a_few_summary_lines(tmp_path, caplog, n):
    files = _a_share_folder(tmp_path / "day", n)
    store = tmp_path / "store"
    with caplog.at_level(logging.WARNING):
        rc = main(["import", *map(str, files), "--store", str(store), "--no-progress"])
    assert rc == 0
    lines = _warnings(caplog)
    assert len(lines) <= 3, lines
    (gaps,) = [x for x in lines if "missing sessions" in x]
    suspended = sorted(f"{600000 + i}.SH" if i % 2 == 0 else f"{i:06d}.SZ"
                       for i in range(0, n, 3))
    assert f"in {len(suspended)} symbol(s)" in gaps and f"{suspended[0]} 1" in gaps
    # the symbol column is recognised: no hint to use it as a price, no warning at all
    assert not any("'symbol'" in x for x in lines), lines
    st = KlineStore(store)
    assert len(st.symbols()) == n and st.version == 1
    # one command, each suffix onto its calendar
    assert st.metadata("600000.SH")["exchange"] == "XSHG"
    assert st.metadata("000001.SZ")["exchange"] == "XSHE"


def test_a_symbol_column_with_several_symbols_is_refused_naming_the_flag(tmp_path, capsys):
    f = tmp_path / "day.csv"
    pd.concat([_rows("600000.SH", SESSIONS), _rows("000001.SZ", SESSIONS)]).to_csv(f, index=False)
    assert main(["import", str(f), "--store", str(tmp_path / "s"), "--no-progress"]) == 1
    assert "--symbol-column 'symbol'" in capsys.readouterr().err


def test_a_symbol_column_naming_another_symbol_is_one_warning(tmp_path, caplog):
    f = tmp_path / "GOOG_DAILY.csv"
    _rows("GOOG", SESSIONS).to_csv(f, index=False)
    with caplog.at_level(logging.WARNING):
        out = import_files([f], tmp_path / "s", progress=False)
    assert out[0].ok and out[0].symbol == "GOOG_DAILY"
    (line,) = _warnings(caplog)
    assert "column 'symbol' says 'GOOG'" in line and "--symbol-column 'symbol'" in line


def test_a_mixed_day_file_imports_in_one_command_onto_the_right_calendars(tmp_path, capsys):
    store = tmp_path / "store"
    day = pd.concat([_rows(s, SESSIONS, b) for s, b in
                     (("600000.SH", 10), ("000001.SZ", 12), ("830799.BJ", 8), ("AAPL", 150))])
    f = tmp_path / "2024-09-30.csv"
    day.to_csv(f, index=False)
    assert main(["import", str(f), "--store", str(store), "--symbol-column", "symbol",
                 "--no-progress"]) == 0
    st = KlineStore(store)
    got = {s: st.metadata(s).get("exchange") for s in st.symbols()}
    assert got == {"600000.SH": "XSHG", "000001.SZ": "XSHE", "830799.BJ": "BJSE", "AAPL": None}
    # each on its calendar: the first session after the National Day week is 10-08
    for s in ("600000.SH", "000001.SZ", "830799.BJ"):
        future = future_timestamps(SESSIONS, 2, exchange=calendar_of(st.metadata(s)))
        assert [str(t.date()) for t in pd.DatetimeIndex(future)] == ["2024-10-08", "2024-10-09"]
    assert "4 symbol(s) changed" in capsys.readouterr().out


def test_the_suffix_mapping_is_overridable(tmp_path):
    f = tmp_path / "day.csv"
    pd.concat([_rows("830799.BJ", SESSIONS), _rows("600000.SH", SESSIONS)]).to_csv(f, index=False)
    base = ["import", str(f), "--symbol-column", "symbol", "--no-progress", "--store"]
    assert main([*base, str(tmp_path / "a"), "--suffix-exchange", ".BJ=XSHG"]) == 0
    assert KlineStore(tmp_path / "a").metadata("830799.BJ")["exchange"] == "XSHG"
    assert main([*base, str(tmp_path / "b"), "--no-suffix-exchange"]) == 0
    assert "exchange" not in KlineStore(tmp_path / "b").metadata("600000.SH")
    assert main([*base, str(tmp_path / "c"), "--exchange", "XHKG"]) == 0  # the flag wins
    assert KlineStore(tmp_path / "c").metadata("600000.SH")["exchange"] == "XHKG"
    assert main([*base, str(tmp_path / "d"), "--suffix-exchange", ".BJ=NOPE"]) == 2


def test_exchange_from_symbol():
    assert exchange_from_symbol("600000.SH") == exchange_from_symbol("600000.ss") == "XSHG"
    assert exchange_from_symbol("000001.SZ") == "XSHE"
    assert exchange_from_symbol("830799.BJ") == "BJSE"
    assert exchange_from_symbol("AAPL") is exchange_from_symbol("BRK.B") is None
    assert exchange_from_symbol(".SH") is None
    over = parse_suffix_overrides(["bj=XSHG", ".SZ=none"])
    assert exchange_from_symbol("830799.BJ", over) == "XSHG"
    assert exchange_from_symbol("000001.SZ", over) is None
    with pytest.raises(ValueError, match="SUFFIX=MIC"):
        parse_suffix_overrides([".BJ"])
    # Beijing has no calendar of its own in exchange_calendars: Shanghai's, under its own name
    bj, sh = exchange_sessions("BJSE"), exchange_sessions("XSHG")
    assert bj.name == "BJSE" and np.array_equal(bj.day, sh.day)


def _frame(**prices) -> pd.DataFrame:
    days = pd.bdate_range("2024-01-02", periods=4)
    df = pd.DataFrame({"timestamps": days, "open": 10.0, "high": 11.0, "low": 9.0, "close": 10.5})
    for col, value in prices.items():
        df.loc[2, col] = value
    return df


def test_a_negative_close_is_one_complaint_without_a_knock_on():
    with pytest.raises(CandleError) as ei:
        validate_candles(_frame(close=-1.0))
    msg = str(ei.value)
    assert "column 'close': zero or negative price in 1 row 3" in msg
    assert "--fix-high-low" not in msg and "low above" not in msg
    # a real high/low problem in another row is still reported
    df = _frame(close=-1.0)
    df.loc[0, "low"] = 10.8
    assert "low above open/close in 1 row 1" in str(pytest.raises(
        CandleError, validate_candles, df).value)


def test_an_open_alone_below_zero_is_refused_even_with_fix_high_low():
    with pytest.raises(CandleError, match="column 'open': zero or negative price in 1 row 3"):
        validate_candles(_frame(open=-1.0), repairs=Repairs(fix_high_low=True))


def test_summaries_count_symbols_once_and_name_the_files_held_back(tmp_path, capsys, caplog):
    store = tmp_path / "store"
    first = tmp_path / "history.csv"
    pd.concat([_rows(s, SESSIONS[:2]) for s in ("600000.SH", "600001.SH", "000001.SZ")]
              ).to_csv(first, index=False)
    flags = ["--symbol-column", "symbol", "--no-progress"]
    assert main(["import", str(first), "--store", str(store), *flags]) == 0
    days = []
    for d in SESSIONS[2:]:  # four day files of the three symbols
        f = tmp_path / f"{d.date()}.csv"
        pd.concat([_rows(s, pd.DatetimeIndex([d])) for s in ("600000.SH", "600001.SH",
                                                               "000001.SZ")]).to_csv(f, index=False)
        days.append(str(f))
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="kronos_core"):
        assert main(["import", *days, "--store", str(store), *flags]) == 0
    out = capsys.readouterr().out
    assert "4 file(s), 3 symbol(s) changed (+12 candles)" in out, out
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("3 symbol(s) changed (+12 candles)" in x for x in info), info
    # a bad file among good ones: nothing published, and the summary says what was held back
    good = [tmp_path / f"S{i}.csv" for i in range(3)]
    for i, g in enumerate(good):
        _rows(f"60010{i}.SH", SESSIONS).to_csv(g, index=False)
    bad = tmp_path / "BAD.SH.csv"
    _rows("BAD.SH", SESSIONS).assign(close=-1.0).to_csv(bad, index=False)
    assert main(["import", *map(str, good), str(bad), "--store", str(store), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "3 valid file(s) not published: the import is all-or-nothing" in err, err
    assert "0 symbol(s) changed" in err and "1 failed" in err
