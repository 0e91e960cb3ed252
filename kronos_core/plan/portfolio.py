"""The arithmetic (FLOPs) of a portfolio forecast, counted as the engine runs it: what
``kronos bench portfolio`` sets the engine's time against (its windows:
``kronos_core.data.portfolio_windows``)."""

from __future__ import annotations

from dataclasses import dataclass

from kronos_core.engine.memory import count_parameters
from kronos_core.model.config import KronosConfig, TokenizerConfig


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
