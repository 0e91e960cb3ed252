"""``kronos forecast``'s quantile columns: one per level, named by the shared labeller."""

from __future__ import annotations

import pandas as pd

from kronos_core.cli import main
from kronos_core.data.sample_store import REAL_DIR


def test_close_levels_get_distinct_columns(tmp_path):
    """Two levels that agree to six digits are two columns (``f"{q:g}"`` named both
    ``q0.123457``)."""
    out = tmp_path / "f.csv"
    code = main(
        [
            "forecast", "--csv", str(REAL_DIR / "eurusd_hourly.csv"), "--horizon", "2", "--samples",
            "3", "--seed", "4", "--quantiles", "0.1234567,0.1234568", "--lookback", "64", "--out",
            str(out),
        ]
    )
    assert code == 0
    columns = set(pd.read_csv(out).columns)
    assert {"close_q0.1234567", "close_q0.1234568"} <= columns
    assert len([c for c in columns if c.startswith("close_q")]) == 2


def test_bad_quantile_flag_is_a_usage_error(tmp_path, capsys):
    code = main(["forecast", "--csv", str(REAL_DIR / "eurusd_hourly.csv"), "--horizon", "2",
                 "--quantiles", "0.5,1.5"])
    assert code == 2
    assert "quantiles must be in (0, 1)" in capsys.readouterr().err
