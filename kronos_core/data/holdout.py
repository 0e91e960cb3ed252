"""The hold-out check of ``future_timestamps`` on a real series (``kronos timestamps-holdout``),
and the calendar helpers it can leak the future with: a series' missing trading days and
short sessions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from kronos_core.data.sessions import DAY_NS, EPOCH_WEEKDAY, MAJORITY, as_int64, session_clock
from kronos_core.data.timestamps import future_timestamps


def missing_trading_days(timestamps) -> pd.DatetimeIndex:
    """Dates inside a series' span with no candle, on weekdays it usually trades.

    A weekday "usually trades" when at least half of its calendar dates in the span
    have candles. These are the series' full-day closures (exchange holidays, data
    outages): the exchange calendar one would pass as ``holidays``.
    """
    ts = as_int64(timestamps)
    days = np.unique(ts // DAY_NS)
    cal = np.arange(days[0], days[-1] + 1)
    present = np.isin(cal, days)
    wd = (cal + EPOCH_WEEKDAY) % 7
    usual = [d for d in range(7) if (wd == d).any() and present[wd == d].mean() >= MAJORITY]
    missing = cal[~present & np.isin(wd, usual)]
    return pd.DatetimeIndex((missing * DAY_NS).view("datetime64[ns]"))


def short_session_days(timestamps, ratio: float = 0.5) -> pd.DatetimeIndex:
    """Dates (not the first or last of the series) with fewer than ``ratio`` times the
    median number of candles of their weekday: half-day sessions and data holes."""
    ts = as_int64(timestamps)
    days, counts = np.unique(ts // DAY_NS, return_counts=True)
    wd = (days + EPOCH_WEEKDAY) % 7
    short = np.zeros(len(days), bool)
    for d in range(7):
        m = wd == d
        if m.any():
            short[m] = counts[m] < ratio * np.median(counts[m])
    short[0] = short[-1] = False
    return pd.DatetimeIndex((days[short] * DAY_NS).view("datetime64[ns]"))


@dataclass
class HoldoutResult:
    """Outcome of ``holdout_hit_rate``: ``rate = hits / compared`` (dates right) and
    ``window_rate = windows_right / (cuts - excluded_cuts)`` (whole horizons right)."""

    hits: int
    compared: int
    cuts: int
    excluded_cuts: int
    windows_right: int = 0

    @property
    def rate(self) -> float:
        return self.hits / self.compared if self.compared else float("nan")

    @property
    def window_rate(self) -> float:
        judged = self.cuts - self.excluded_cuts
        return self.windows_right / judged if judged else float("nan")


def holdout_hit_rate(
    timestamps,
    horizon: int,
    lookback: int = 512,
    stride: int = 1,
    use_holidays: bool = False,
    timezone=None,
    session_timezone=None,
    *,
    exchange: str | None = None,
    exclude_closures: bool = False,
    progress: bool = False,
) -> HoldoutResult:
    """Hold-out check of ``future_timestamps`` on a real series, as a user calls it.

    For every cut ``c`` in ``lookback, lookback + stride, ...`` up to ``n - horizon``, predict
    the next ``horizon`` timestamps from the ``lookback`` timestamps before the cut (and
    ``exchange``, if given) and count those equal to the real ``ts[c : c + horizon]``,
    position by position. By default nothing is taken from the future: no holiday list,
    no cut left out.

    Two leaky options remain for comparison only (they read the whole series, future
    included, which a user cannot do): ``use_holidays`` passes the series' own
    ``missing_trading_days`` as the holiday list and leaves out cuts whose window touches a
    ``short_session_days`` date; ``exclude_closures`` leaves out cuts whose window spans a
    missing trading day or a short session.
    """
    hist = pd.DatetimeIndex(timestamps)
    ts = as_int64(hist)
    n = len(ts)
    skip_days = np.empty(0, np.int64)
    holidays = None
    clock = ts
    if use_holidays or exclude_closures:
        clock = as_int64(session_clock(hist, timezone, session_timezone))
        missing = missing_trading_days(clock)
        skip_days = short_session_days(clock).asi8 // DAY_NS
        if use_holidays:
            holidays = missing
        else:
            skip_days = np.union1d(skip_days, missing.asi8 // DAY_NS)
    result = HoldoutResult(0, 0, 0, 0)
    cuts = range(lookback, n - horizon + 1, stride)
    for c in tqdm(
        cuts, desc=f"hold-out h={horizon}", unit="cut", disable=not progress, leave=False
    ):
        result.cuts += 1
        if len(skip_days):
            window_days = np.arange(clock[c - 1] // DAY_NS, clock[c + horizon - 1] // DAY_NS + 1)
            if np.isin(window_days, skip_days).any():
                result.excluded_cuts += 1
                continue
        pred = future_timestamps(
            hist[c - lookback : c], horizon, holidays, timezone=timezone,
            session_timezone=session_timezone, exchange=exchange,
        )
        right = int((as_int64(pred) == ts[c : c + horizon]).sum())
        result.hits += right
        result.compared += horizon
        result.windows_right += int(right == horizon)
    return result
