"""A portfolio workload for the engine's speed figures: the last ``lookback`` candles of the
first ``n`` symbols of the sample store.

``kronos bench portfolio`` and ``scripts/profile-engine.py`` run this workload in-process;
the service side of the benchmark sends the same symbols by name. The future stamps continue
each window at its median step (they only feed the time embeddings, so they change nothing of
the cost). Its arithmetic: ``kronos_core.plan.portfolio.forecast_flops``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class PortfolioWindows:
    """``symbols[i]``'s window ``values[i]`` (L_i, 6) float32, its stamps ``x_stamps[i]`` and the
    ``horizon`` future stamps ``y_stamps[i]``."""

    symbols: list[str]
    values: list[np.ndarray]
    x_stamps: list[pd.DatetimeIndex]
    y_stamps: list[pd.DatetimeIndex]

    def __len__(self) -> int:
        return len(self.symbols)

    def chunk(self, start: int, stop: int) -> PortfolioWindows:
        return PortfolioWindows(
            self.symbols[start:stop], self.values[start:stop], self.x_stamps[start:stop],
            self.y_stamps[start:stop],
        )


def sample_store_windows(n: int, lookback: int, horizon: int) -> PortfolioWindows:
    """The last ``lookback`` candles of the sample store's first ``n`` symbols (5-minute
    candles; built into the cache on first use). ``ValueError`` when the store holds fewer."""
    from kronos_core.data.sample_store import default_sample_store
    from kronos_core.data.store import KlineStore

    store = KlineStore(default_sample_store())
    symbols = sorted(store.symbols())
    if n > len(symbols):
        raise ValueError(f"the sample store holds {len(symbols)} symbols, {n} asked")
    batch = store.read_windows(symbols[:n], lookback)
    if batch.errors:
        first = batch.errors[0]
        raise ValueError(f"{len(batch.errors)} symbols failed to read, first {first}")
    values, xs, ys = [], [], []
    for w in batch.windows:
        stamps = pd.DatetimeIndex(w.timestamps)
        step = pd.Timedelta(np.median(np.diff(w.timestamps))) if len(stamps) > 1 else pd.Timedelta(
            "5min"
        )
        values.append(np.asarray(w.values, dtype=np.float32))
        xs.append(stamps)
        ys.append(pd.DatetimeIndex([stamps[-1] + step * (k + 1) for k in range(horizon)]))
    return PortfolioWindows(batch.symbols, values, xs, ys)
