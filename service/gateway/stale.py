"""Stale series (issue 52): a symbol whose last candle is behind the portfolio.

A suspended stock's forecast starts after its last candle, so its forecast dates may already
be past while its neighbours' are not; the row must say so. The rules:

* The portfolio's as-of is the latest time that most (more than half) of the request's series
  have a candle at or after: the upper median of their last candles. In a portfolio whose 941
  of 945 symbols end on 2019-06-21 it is 2019-06-21, whatever the other four do; the answer
  carries it. A most common last candle would also do there, but means little when the last
  candles all differ (inline series of several frequencies).
* Sessions missed are counted on the series' own clock: the slots its future timestamps would
  take (its exchange's calendar when it has one, else the sessions learned from its history)
  that fall after its last candle and at or before a reference time. A holiday of its own
  exchange is therefore never a missed session.
* Stale: at least one session missed up to the request's ``as_of`` (the caller named the time),
  or more than one up to the portfolio's as-of. One session of slack against the portfolio
  because stamps are wall clocks: a New York daily candle of today is not in yet while a
  Shanghai one is, and neither symbol is stale.
* Counting stops at ``MAX_COUNT`` slots; a longer gap is reported as "at least" that many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

MAX_COUNT = 4096  # slots counted at most; a symbol suspended longer is "at least" this stale
_DAY_NS = 20 * 3600 * 10**9  # slots this far apart or more are sessions (daily or slower)


def portfolio_as_of(last_candles: list[np.datetime64]) -> np.datetime64 | None:
    """The latest time that more than half of ``last_candles`` reach (the module docstring);
    None without series."""
    if not last_candles:
        return None
    latest_first = np.sort(np.asarray(last_candles, dtype="datetime64[ns]"))[::-1]  # (N,)
    return latest_first[len(latest_first) // 2]  # that many + 1 series are at or after it


def slots_until(slots: Callable[[int], np.ndarray], first: np.ndarray,
                reference: np.datetime64) -> int:
    """How many of a series' next slots lie at or before ``reference``.

    ``first``: its next slots already derived (the forecast's own timestamps, (H,)); ``slots(n)``
    derives its next ``n``, asked only when every one of ``first`` is at or before ``reference``
    (then 8 times as many, up to ``MAX_COUNT``)."""
    have = first
    while True:
        count = int(np.searchsorted(have, reference, side="right"))
        if count < len(have) or len(have) >= MAX_COUNT:
            return min(count, MAX_COUNT)
        have = slots(min(MAX_COUNT, max(64, 8 * len(have))))


@dataclass(frozen=True)
class Staleness:
    """Why a series is stale: its last candle, the sessions it missed, and up to when."""

    last_candle: np.datetime64
    missed: int
    reference: np.datetime64
    against: str  # "as_of" (the request's) or "portfolio" (the portfolio's as-of)
    unit: str  # "sessions" or "candles" (intraday series)
    clock: str  # whose sessions: "the XSHG calendar" or "sessions learned from its history"

    def message(self) -> str:
        last, ref = _text(self.last_candle), _text(self.reference)
        count = f"at least {self.missed}" if self.missed >= MAX_COUNT else str(self.missed)
        up_to = (f"the request's as_of {ref}" if self.against == "as_of"
                 else f"the portfolio's as-of {ref} (most of its series are at or after it)")
        return (f"last candle {last}: {count} {self.unit} missed up to {up_to}, counted on "
                f"{self.clock}; its forecast starts after {last}")


def _text(t: np.datetime64) -> str:
    return str(pd.Timestamp(t))


def staleness(last_candle: np.datetime64, future_ts: np.ndarray,
              slots: Callable[[int], np.ndarray], portfolio: np.datetime64 | None,
              as_of: np.datetime64 | None, exchange: str | None) -> Staleness | None:
    """The series' ``Staleness``, or None when it is current (the module docstring's rules).

    ``future_ts``: its forecast's timestamps (H,), datetime64[ns]; ``slots(n)``: its next ``n``
    slots; ``as_of``: the request's as_of as the series' wall clock (None: not asked)."""
    unit = "sessions" if len(future_ts) and _step_ns(last_candle, future_ts) >= _DAY_NS \
        else "candles"
    clock = f"the {exchange} calendar" if exchange else "the sessions learned from its history"
    checks = [(as_of, "as_of", 1), (portfolio, "portfolio", 2)]
    for reference, against, at_least in checks:
        if reference is None or reference <= last_candle:
            continue
        missed = slots_until(slots, future_ts, reference)
        if missed >= at_least:
            return Staleness(last_candle, missed, reference, against, unit, clock)
    return None


def _step_ns(last_candle: np.datetime64, future_ts: np.ndarray) -> int:
    """The series' typical slot length in ns: the median step from its last candle through its
    future slots (an hourly series' overnight step does not make it daily)."""
    stamps = np.concatenate([np.asarray([last_candle], dtype="datetime64[ns]"),
                             future_ts.astype("datetime64[ns]")])  # (H+1,)
    return int(np.median(np.diff(stamps).astype(np.int64)))
