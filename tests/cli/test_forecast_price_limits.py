"""``kronos forecast`` and daily price limits: a Shanghai stock's file (its symbol from the file
name) is held to its limit, ``--st`` to the ST stock's 5%, ``--no-price-limits`` leaves the paths
as sampled, and the rule used is printed."""

from __future__ import annotations

import numpy as np
import pandas as pd
from fixture_paths import TINY

from kronos_core.cli import main


def _write(path, daily: float = -0.05, n: int = 60):
    stamps = pd.bdate_range(end="2019-06-21", periods=n)
    close = 8.0 * (1 + daily) ** np.arange(n)
    opens = close / (1 + daily)
    pd.DataFrame({"timestamps": stamps, "open": opens, "high": np.maximum(opens, close) * 1.01,
                  "low": np.minimum(opens, close) * 0.99, "close": close,
                  "volume": 1e6}).to_csv(path, index=False)
    return float(close[-1])


def _run(csv, out, *flags) -> pd.DataFrame:
    code = main(["forecast", "--model", TINY, "--csv", str(csv), "--horizon", "5", "--samples",
                 "64", "--temperature", "3", "--top-p", "1", "--seed", "2", "--quantiles",
                 "0.02,0.98", "--out", str(out), *flags])
    assert code == 0
    return pd.read_csv(out)


def _outer_band(table: pd.DataFrame, last: float) -> float:
    """The largest |5-step quantile close / last - 1|, per step compounded back to one day."""
    hi, lo = table["close_q0.98"].to_numpy(), table["close_q0.02"].to_numpy()
    steps = np.arange(1, len(table) + 1)
    up, down = (hi / last) ** (1 / steps) - 1, 1 - (lo / last) ** (1 / steps)
    return float(max(up.max(), down.max()))


def test_st_file_is_held_to_5pct_and_names_the_rule(tmp_path, capsys):
    last = _write(tmp_path / "600518.SH.csv")
    held = _run(tmp_path / "600518.SH.csv", tmp_path / "st.csv", "--st")
    assert "price limit: main board ST ±5%" in capsys.readouterr().err
    free = _run(tmp_path / "600518.SH.csv", tmp_path / "free.csv", "--st", "--no-price-limits")
    assert "not applied: --no-price-limits" in capsys.readouterr().err
    assert _outer_band(held, last) <= 0.05 + 1e-5
    assert _outer_band(free, last) > 0.05  # as sampled, the tiny model goes far beyond


def test_unmarked_main_board_file_is_held_to_10pct(tmp_path, capsys):
    last = _write(tmp_path / "in.csv")
    table = _run(tmp_path / "in.csv", tmp_path / "f.csv", "--symbol", "600518.SH")
    assert "main board ±10%, ST status unknown" in capsys.readouterr().err
    assert _outer_band(table, last) <= 0.10 + 1e-5
    free = _run(tmp_path / "in.csv", tmp_path / "free.csv", "--symbol", "600518.SH",
                "--no-price-limits")
    assert _outer_band(free, last) > 0.10


def test_a_bad_listing_date_is_refused_naming_it(tmp_path, capsys):
    _write(tmp_path / "600518.SH.csv")
    code = main(["forecast", "--model", TINY, "--csv", str(tmp_path / "600518.SH.csv"),
                 "--horizon", "2", "--listed", "2019-13-01"])
    assert code == 2 and "listed '2019-13-01' is not a date" in capsys.readouterr().err
