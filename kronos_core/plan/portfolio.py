"""A portfolio workload for the engine's speed figures: the last ``lookback`` candles of the
first ``n`` symbols of the sample store, and the arithmetic (FLOPs) of forecasting them.

``kronos bench portfolio`` and ``scripts/profile-engine.py`` run this workload in-process;
the service benchmark sends the same symbols by name. The future stamps continue each window
at its median step (they only feed the time embeddings, so they change nothing of the cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kronos_core.engine.memory import count_parameters
from kronos_core.model.config import KronosConfig, TokenizerConfig


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


@dataclass(frozen=True)
class ForecastFlops:
    """Floating-point operations of one forecast (multiply-add = 2), by part."""

    tokenize: float  # tokenizer encoder over every history candle, once per series
    prefill: float  # the trunk over every history window, once per series (paths share it)
    decode: float  # every path's decode steps: trunk, s2 head's keys, both heads, attention
    detokenize: float  # tokenizer decoder: each series' history part once, every path's horizon

    @property
    def total(self) -> float:
        return self.tokenize + self.prefill + self.decode + self.detokenize


def forecast_flops(
    cfg: KronosConfig, tok: TokenizerConfig, lengths: list[int], horizon: int, paths: int,
    max_context: int,
) -> ForecastFlops:
    """The arithmetic of forecasting series of history ``lengths`` with ``paths`` paths each, by
    the roofline's counting (``kronos_core.plan.roofline.infer_seconds``: 2 FLOPs a weight and
    token, attention ``2 * n * ctx * d`` for scores and values each), but summed over the real
    lengths and counting what each path shares with its series once, as the engine runs it: the
    prefill, and the token-to-candle decoder over the window's history part (each path then
    decodes its own horizon)."""
    counts, tcounts = count_parameters(cfg), count_parameters(tok)
    d, layers = cfg.d_model, cfg.n_layers
    # the prefill runs neither head nor the s2 head's query and output projections
    prefill_linear = counts.linear - d * (2**cfg.s1_bits + 2**cfg.s2_bits) - 2 * d * d
    tokenize = prefill = decode = detok = 0.0
    for length in lengths:
        window = min(length, max_context)
        tokenize += 2 * tcounts.linear / 2 * length  # the encoder half of the tokenizer
        prefill += 2 * window * prefill_linear + 2 * window**2 * d * layers  # causal QK^T, AV
        for step in range(horizon):
            ctx = min(window + step + 1, max_context)
            # trunk + both heads per row; attention over ctx keys in each layer and the s2 head
            # (whose 4 heads span d, so it counts as one more layer)
            decode += paths * (2 * counts.linear + 4 * ctx * d * (layers + 1))
        # the decoder half: the window's history part once per series, each path's horizon
        out_window = min(length + horizon, max_context)
        detok += 2 * tcounts.linear / 2 * ((out_window - horizon) + paths * horizon)
    return ForecastFlops(tokenize, prefill, decode, detok)
