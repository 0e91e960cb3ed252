"""The price-limit details an import records per symbol (``kronos_core.data.symbol_details``):
``kronos import --st / --not-st / --board`` and the symbol map's ``st``, ``board``, ``listed``
columns land in each symbol's store metadata, where ``rule_for`` reads them; bad values are
refused naming the file, row or flag, and nothing is imported."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kronos_core.base.candles import CandleError
from kronos_core.base.price_limits import rule_for
from kronos_core.cli import main
from kronos_core.data.store import KlineStore
from kronos_core.data.symbol_details import flag_details, read_symbol_details


def _daily(path, n: int = 30, start: float = 5.0):
    stamps = pd.bdate_range(end="2019-06-21", periods=n)
    close = start * (1 + 0.01 * np.sin(np.arange(n)))
    pd.DataFrame({"timestamps": stamps, "open": close, "high": close * 1.01, "low": close * 0.99,
                  "close": close, "volume": 1e5}).to_csv(path, index=False)
    return path


def test_st_flags_reach_the_metadata_and_the_rule(tmp_path, capsys):
    files = [str(_daily(tmp_path / f"{s}.csv")) for s in ("600518.SH", "600000.SH", "300750.SZ")]
    store = tmp_path / "store"
    assert main(["import", *files, "--store", str(store), "--no-progress",
                 "--st", "600518.sh", "--not-st", "300750.SZ"]) == 0
    ks = KlineStore(store)
    rules = {s: rule_for(s, ks.metadata(s)) for s in ("600518.SH", "600000.SH", "300750.SZ")}
    assert rules["600518.SH"].special_treatment is True
    assert rules["600000.SH"].special_treatment is None  # never said: unknown
    assert rules["300750.SZ"].special_treatment is False
    # a later import without the flags keeps the stored status; --not-st lifts it
    assert main(["import", files[0], "--store", str(store), "--no-progress"]) == 0
    assert KlineStore(store).metadata("600518.SH")["special_treatment"] is True
    assert main(["import", files[0], "--store", str(store), "--no-progress",
                 "--not-st", "600518.SH"]) == 0
    assert KlineStore(store).metadata("600518.SH")["special_treatment"] is False


def test_symbol_map_columns(tmp_path):
    src = _daily(tmp_path / "KMYY.csv")
    star = _daily(tmp_path / "NEWCO.csv")
    smap = tmp_path / "map.csv"
    smap.write_text("vendor,store,st,board,listed\nKMYY,600518.SH,yes,,\n"
                    "NEWCO,688999.SH,,star,2019-07-22\n")
    store = tmp_path / "store"
    assert main(["import", str(src), str(star), "--store", str(store), "--no-progress",
                 "--symbol-map", str(smap)]) == 0
    ks = KlineStore(store)
    assert ks.metadata("600518.SH")["special_treatment"] is True
    meta = ks.metadata("688999.SH")
    assert meta["board"] == "star" and meta["listed"] == "2019-07-22"
    assert "special_treatment" not in meta
    assert rule_for("688999.SH", meta).listed == np.datetime64("2019-07-22")


def test_board_flag_for_every_symbol(tmp_path):
    store = tmp_path / "store"
    assert main(["import", str(_daily(tmp_path / "510300.SH.csv")), "--store", str(store),
                 "--no-progress", "--board", "main"]) == 0
    assert rule_for("510300.SH", KlineStore(store).metadata("510300.SH")).board == "main"


@pytest.mark.parametrize("row, message", [
    ("KMYY,600518.SH,maybe,,", "row 1: st: expected yes/no"),
    ("KMYY,600518.SH,,gem,", "row 1: board must be one of"),
    ("KMYY,600518.SH,,,2019-02-30", "row 1: listed must be a date"),
])
def test_bad_map_cells_are_refused_naming_the_row(tmp_path, capsys, row, message):
    smap = tmp_path / "map.csv"
    smap.write_text(f"vendor,store,st,board,listed\n{row}\n")
    with pytest.raises(CandleError, match=message):
        read_symbol_details(smap)
    store = tmp_path / "store"
    assert main(["import", str(_daily(tmp_path / "KMYY.csv")), "--store", str(store),
                 "--no-progress", "--symbol-map", str(smap)]) == 2
    assert message in capsys.readouterr().err and not store.exists()


def test_flag_conflicts_and_a_map_without_detail_columns(tmp_path):
    with pytest.raises(CandleError, match="both name 600518.SH"):
        flag_details(["600518.SH"], ["600518.sh"])
    with pytest.raises(CandleError, match="--board: board must be"):
        flag_details(board="growth")
    smap = tmp_path / "map.csv"
    smap.write_text("vendor,store\n^GSPC,GSPC\n")
    assert read_symbol_details(smap) == {}


def test_st_naming_a_symbol_not_imported_is_warned(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["import", str(_daily(tmp_path / "600000.SH.csv")), "--store", str(store),
                 "--no-progress", "--st", "600519.SH"]) == 0
    assert "--st/--not-st name 600519.SH" in capsys.readouterr().err
