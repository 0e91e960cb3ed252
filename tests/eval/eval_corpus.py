"""A tiny synthetic corpus folder (instruments.csv + one Parquet file), laid out like
``../shared/data/corpus``, so the corpus commands are tested without the shared folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

# symbol, underlying, market, frequency, split, rows
INSTRUMENTS = (
    ("AAA", "AAA", "US", "1d", "train", 360),
    ("BBB", "BBB", "US", "1d", "train", 360),
    ("CCC", "CCC", "US", "1d", "train", 360),
    ("HHH", "HHH", "US", "1d", "holdout_instrument", 360),
    ("EUR/XXX@1h", "EUR/XXX", "FX", "1h", "train", 400),
)
EVAL_FRACTION = 0.25  # the last quarter of each series is its evaluation period


def _candles(rows: int, freq: str, seed: int) -> pd.DataFrame:
    """A GARCH-like random walk of candles (positive, with volatility clusters)."""
    rng = np.random.default_rng(seed)
    if freq == "1d":
        stamps = pd.bdate_range("2015-01-05", periods=rows)
    else:
        days = pd.bdate_range("2016-03-01", periods=rows // 24 + 2)
        hours = [d + pd.Timedelta(hours=h) for d in days for h in range(24)]
        stamps = pd.DatetimeIndex(hours)[:rows]
    vol = np.empty(rows)
    v = 0.01 ** 2
    r = np.empty(rows)
    for t in range(rows):  # sigma2 = 1e-6 + 0.1 r^2 + 0.88 sigma2
        r[t] = np.sqrt(v) * rng.standard_t(6) / np.sqrt(1.5)
        vol[t] = v
        v = 1e-6 + 0.1 * r[t] ** 2 + 0.88 * v
    close = 50.0 * np.exp(np.cumsum(r))
    open_ = np.concatenate([[close[0]], close[:-1]])
    spread = np.abs(rng.normal(0, np.sqrt(vol), rows)) * close
    return pd.DataFrame({
        "timestamps": stamps, "open": open_, "high": np.maximum(open_, close) + spread,
        "low": np.minimum(open_, close) - spread, "close": close,
        "volume": rng.uniform(1e5, 2e5, rows), "amount": np.nan,
    })


def write_corpus(root: Path, changed_after_eval: bool = False) -> Path:
    """The corpus folder under ``root``; ``changed_after_eval``: every row in an evaluation period
    is replaced by other candles (rows before ``eval_from`` stay identical)."""
    root.mkdir(parents=True, exist_ok=True)
    frames, rows = [], []
    for k, (sym, und, market, freq, split, n) in enumerate(INSTRUMENTS):
        df = _candles(n, freq, seed=k)
        first_eval = int(n * (1 - EVAL_FRACTION))
        if changed_after_eval:
            other = _candles(n, freq, seed=100 + k)
            scale = df["close"].iloc[first_eval - 1] / other["close"].iloc[first_eval - 1]
            for c in ("open", "high", "low", "close"):
                df.loc[first_eval:, c] = other.loc[first_eval:, c] * scale
        df.insert(0, "symbol", sym)
        frames.append(df)
        rows.append({"symbol": sym, "underlying": und, "name": sym, "asset_class": "equity"
                     if market == "US" else "fx", "market": market, "frequency": freq,
                     "timezone": "America/New_York", "calendar": "XNYS", "file": "candles.parquet",
                     "rows": n, "first": df["timestamps"].iloc[0],
                     "last": df["timestamps"].iloc[-1],
                     "source_id": "synthetic", "split": split,
                     "eval_from": df["timestamps"].iloc[first_eval]})
    pd.concat(frames).to_parquet(root / "candles.parquet", index=False)
    pd.DataFrame(rows).to_csv(root / "instruments.csv", index=False)
    return root
