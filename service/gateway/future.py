"""Future timestamps of each series (the stamps its forecast candles will carry), cached:
portfolios share calendars, so 1,000 symbols usually need only a handful of distinct calls."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd


def to_ns(ts) -> np.ndarray:
    """Naive datetime64[ns]; an aware index keeps its local wall clock (what time features see)."""
    idx = pd.DatetimeIndex(ts)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    # as_unit raises OutOfBoundsDatetime (a ValueError) outside 1677-2262, where a plain cast wraps
    # silently
    return idx.as_unit("ns").to_numpy(dtype="datetime64[ns]")


class FutureTimestamps:
    """``future_timestamps`` with a cache keyed by the history, horizon, session and exchange."""

    def __init__(self, fn: Callable[..., pd.DatetimeIndex] | None = None, size: int = 4096):
        if fn is None:
            from kronos_core.data.timestamps import future_timestamps

            fn = future_timestamps
        self.fn = fn
        self.size = size
        self._cache: dict[tuple, np.ndarray] = {}

    def __call__(
        self, history: np.ndarray, horizon: int, session: tuple[str | None, str] | None = None,
        exchange: str | None = None,
    ) -> np.ndarray:
        """session: (timezone, session_timezone) from the symbol's metadata, for markets whose
        sessions follow another clock than their stamps (spot FX: New York). exchange: the
        venue (XNYS, XSHG, ...) whose calendar gives the dates (holidays included)."""
        h = np.ascontiguousarray(history.astype("datetime64[ns]"))
        key = (
            hashlib.blake2b(h.view(np.int64).tobytes(), digest_size=16).digest(), horizon, session,
            exchange,
        )
        hit = self._cache.get(key)
        if hit is None:
            kw: dict[str, Any] = {}
            if session is not None:
                kw["timezone"], kw["session_timezone"] = session
            if exchange is not None:
                kw["exchange"] = exchange
            hit = to_ns(self.fn(pd.DatetimeIndex(h), horizon, **kw))
            if len(hit) != horizon:
                raise ValueError(
                    f"future_timestamps returned {len(hit)} timestamps for horizon {horizon}"
                )
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = hit
        return hit


class SessionGaps:
    """``kronos_core.data.gaps.missing_sessions`` with a cache keyed by the history and the
    exchange: a portfolio's symbols mostly share their dates, so 1,000 symbols cost a few
    checks. Returns the warning message, or None (no gap, no exchange, unknown venue)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._cache: dict[tuple, str | None] = {}

    def __call__(self, history: np.ndarray, exchange: str | None) -> str | None:
        if not exchange or len(history) < 2:
            return None
        from kronos_core.data.calendars import UnknownExchangeError
        from kronos_core.data.gaps import missing_sessions

        h = np.ascontiguousarray(history.astype("datetime64[ns]"))
        key = (hashlib.blake2b(h.view(np.int64).tobytes(), digest_size=16).digest(), exchange)
        if key not in self._cache:
            try:
                gaps = missing_sessions(h, exchange)
            except UnknownExchangeError:  # the future timestamps report it as the series' error
                gaps = None
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = None if gaps is None else gaps.message()
        return self._cache[key]
