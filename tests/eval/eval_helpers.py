"""Helpers of the evaluation tests: unseen data sets made from the bundled real series."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

REAL = Path(__file__).resolve().parents[2] / "kronos_core" / "data" / "real"


def inverted_eurusd(rows: int = 400) -> pd.DataFrame:
    """A series the project has never seen: USD/EUR (1 / EUR/USD, high and low swapped),
    the last ``rows`` hours, moved three years later."""
    df = pd.read_csv(REAL / "eurusd_hourly.csv", parse_dates=["timestamps"]).tail(rows)
    out = pd.DataFrame(
        {
            "timestamps": df["timestamps"] + pd.DateOffset(years=3), "open": 1 / df["open"],
            "high": 1 / df["low"], "low": 1 / df["high"], "close": 1 / df["close"],
            "volume": df["volume"],
        }
    )
    return out.reset_index(drop=True)


def spliced_universe(n_symbols: int = 3, rows: int = 200) -> list[pd.DataFrame]:
    """Unseen daily symbols on one business-day calendar: segments of the S&P 500 and GOOG
    closes, rescaled, laid on 2030 dates."""
    stamps = pd.bdate_range("2030-01-01", periods=rows)
    spx = pd.read_csv(REAL / "sp500_daily.csv")
    goog = pd.read_csv(REAL / "goog_daily.csv")
    out = []
    for k in range(n_symbols):
        src = (spx if k % 2 == 0 else goog).iloc[300 * k: 300 * k + rows]
        f = pd.DataFrame(
            {c: src[c].to_numpy() * (1 + k) / 10 for c in ("open", "high", "low", "close")}
        )
        f["volume"] = src["volume"].to_numpy()
        f.insert(0, "timestamps", stamps)
        out.append(f)
    return out


def damage_after(values: np.ndarray, row: int, seed: int) -> np.ndarray:
    """A copy of candles (T, 6) whose rows from ``row`` on are scrambled (positive, finite)."""
    rng = np.random.default_rng(seed)
    out = values.copy()
    out[row:] *= rng.uniform(0.2, 5.0, size=out[row:].shape).astype(out.dtype)
    return out

