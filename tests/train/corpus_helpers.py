"""A tiny synthetic corpus (``instruments.csv`` + two Parquet files, the layout of
``../shared/data/corpus``) whose every close names its own row, and an independent reading of
the corpus's two hold-out rules to check what training read against.

Instruments (``underlying``: bar sizes):

* ``AAA`` (US equity): daily, and hourly bars that start inside the daily history and run on
  past its last day, so part of the hourly history lies in the daily evaluation period;
* ``BBB`` (CN equity): daily, and hourly bars over an early stretch of it whose evaluation
  period starts in the middle of a day, so those days leave the daily training rows;
* ``HHH`` (US equity): daily and hourly, both ``holdout_instrument``;
* ``CCC`` (FX): daily only, no volume (an all-null column, as the corpus's FX series).

A row's close is ``10_000 * (instrument number) + row``: ``row_of`` turns any value a loader
produced back into (symbol, row, timestamp) in the files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ID_BASE = 10_000
DAILY_ROWS = 300
EVAL_FRACTION = 0.15


def _daily(n: int, start: str = "2020-01-01") -> pd.DatetimeIndex:
    return pd.bdate_range(start, periods=n)


def _hourly(days: pd.DatetimeIndex, hours: tuple[int, ...]) -> pd.DatetimeIndex:
    return pd.DatetimeIndex([d + pd.Timedelta(hours=h) for d in days for h in hours])


def _inst(symbol: str, market: str, frequency: str, ts: pd.DatetimeIndex,
          eval_row: int | None = None, split: str = "train", asset_class: str = "equity") -> dict:
    return {"symbol": symbol, "underlying": symbol.split("@")[0], "market": market,
            "frequency": frequency, "asset_class": asset_class, "split": split, "ts": ts,
            "eval_row": eval_row}


def _spec() -> list[dict]:
    """The instruments (module docstring); ``eval_row`` None: the last 15% of rows."""
    days = _daily(DAILY_ROWS)
    aaa_days = pd.bdate_range(days[230], periods=120)  # runs past the daily series' last day
    bbb_hourly = _hourly(days[50:110], (10, 11, 13, 14))  # 60 days, 4 bars each
    held = "holdout_instrument"
    return [
        _inst("AAA", "US", "1d", days),
        _inst("AAA@1h", "US", "1h", _hourly(aaa_days, (10, 11, 12, 13, 14, 15, 16))),
        _inst("BBB", "CN", "1d", days),
        _inst("BBB@1h", "CN", "1h", bbb_hourly, eval_row=4 * 51 + 2),  # from a day's 13:00 bar
        _inst("HHH", "US", "1d", days, split=held),
        _inst("HHH@1h", "US", "1h", _hourly(days[100:160], (10, 11, 12)), split=held),
        _inst("CCC", "FX", "1d", days, asset_class="fx"),
    ]


_SPEC = _spec()


def write_synthetic_corpus(root: Path) -> Path:
    """Write the corpus into ``root`` (created) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    table, frames = [], {"candles-daily.parquet": [], "candles-intraday.parquet": []}
    for number, spec in enumerate(_SPEC, start=1):
        ts: pd.DatetimeIndex = spec["ts"]
        n = len(ts)
        eval_row = spec["eval_row"] or int(n * (1 - EVAL_FRACTION))
        close = ID_BASE * number + np.arange(n, dtype=np.float64)
        volume = np.nan if spec["asset_class"] == "fx" else 100.0 + np.arange(n)
        frame = pd.DataFrame({
            "symbol": spec["symbol"], "timestamps": ts.as_unit("ns"), "open": close - 0.25,
            "high": close + 0.5, "low": close - 0.5, "close": close, "volume": volume,
            "amount": np.nan,
        })
        file = "candles-daily.parquet" if spec["frequency"] == "1d" else "candles-intraday.parquet"
        frames[file].append(frame)
        table.append({
            **{k: spec[k] for k in ("symbol", "underlying", "asset_class", "market", "frequency",
                                    "split")},
            "name": f"synthetic {spec['symbol']}", "timezone": "UTC", "calendar": "none",
            "file": file, "rows": n, "first": ts[0], "last": ts[-1], "source_id": "synthetic",
            "eval_from": ts[eval_row],
        })
    for file, parts in frames.items():
        pd.concat(parts, ignore_index=True).to_parquet(root / file, index=False)
    pd.DataFrame(table).to_csv(root / "instruments.csv", index=False)
    return root


def row_of(close: float) -> tuple[str, int, pd.Timestamp]:
    """(symbol, row, timestamp) in the synthetic corpus of a close value a loader produced."""
    number, row = divmod(int(round(float(close))), ID_BASE)
    spec = _SPEC[number - 1]
    return spec["symbol"], row, spec["ts"][row]


def covered_span(ts: pd.DatetimeIndex, frequency: str) -> tuple[pd.DatetimeIndex, pd.DatetimeIndex]:
    """The time a bar may cover: a daily bar its whole date, an intraday bar one bar length on
    either side of its label (a label may mark its start or its end)."""
    if frequency == "1d":
        day = ts.normalize()
        return day, day + pd.Timedelta(days=1)
    length = pd.to_timedelta(frequency)
    return ts - length, ts + length


def allowed_by_the_rules(table: pd.DataFrame, symbol: str, ts: pd.DatetimeIndex) -> np.ndarray:
    """(T,) bool, written apart from ``kronos_core.data.corpus``: may training read these rows
    of ``symbol``? Not a hold-out instrument; before its own ``eval_from``; and the bar overlaps
    no evaluation period (first bar's start to last bar's end) of another bar size of its
    underlying."""
    me = table.loc[table["symbol"] == symbol].iloc[0]
    if me["split"] != "train":
        return np.zeros(len(ts), dtype=bool)
    ok = np.asarray(ts < pd.Timestamp(me["eval_from"]))
    lo, hi = covered_span(ts, str(me["frequency"]))
    siblings = table[(table["underlying"] == me["underlying"]) & (table["symbol"] != symbol)]
    for other in siblings.itertuples():
        first = pd.DatetimeIndex([pd.Timestamp(other.eval_from)])
        start = covered_span(first, other.frequency)[0][0]
        end = covered_span(pd.DatetimeIndex([pd.Timestamp(other.last)]), other.frequency)[1][0]
        ok &= ~np.asarray((lo < end) & (hi > start))
    return ok


def read_table(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / "instruments.csv", parse_dates=["first", "last", "eval_from"])
