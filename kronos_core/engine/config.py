"""The engine's configuration and results: ``GenerationConfig``, ``EngineStats``,
``GenerationOutput``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kronos_core.base.lookback import check_horizon
from kronos_core.base.options import SLIDING_MODES, ForecastOptions
from kronos_core.engine.sampling import SamplingParams


@dataclass(frozen=True)
class GenerationConfig:
    """How one engine batch is generated (horizon, context, sampling, sliding, precision,
    compile)."""

    horizon: int  # candles to generate
    max_context: int = 512  # longest window the model sees
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sliding: str = "exact"  # one of SLIDING_MODES
    # torch.bfloat16 / torch.float16 on GPU; None = float32
    autocast_dtype: torch.dtype | None = None
    compile: bool = False  # torch.compile the single-token decode step
    progress: bool = False  # tqdm bar over the decode steps
    # CUDA: torch.compile(mode="reduce-overhead") the decode step; CPU: ignored, logged
    cuda_graphs: bool = False

    def __post_init__(self):
        if self.horizon < 1:
            raise ValueError(f"horizon (pred_len) must be >= 1, got {self.horizon}")
        if self.max_context < 1:
            raise ValueError(f"max_context must be >= 1, got {self.max_context}")
        if self.sliding not in SLIDING_MODES:
            raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {self.sliding!r}")
        check_horizon(self.horizon, self.max_context)  # the last decode covers max_context tokens

    @classmethod
    def from_options(
        cls,
        options: ForecastOptions,
        *,
        max_context: int,
        sliding: str,
        autocast_dtype: torch.dtype | None = None,
        compile: bool = False,
        progress: bool = False,
        cuda_graphs: bool = False,
    ) -> GenerationConfig:
        """The engine's config for one forecast: horizon and sampling from ``options``, the rest
        from the predictor. ``sliding`` is the predictor's mode, used when ``options.sliding`` is
        None."""
        return cls(
            horizon=options.horizon,
            max_context=max_context,
            sampling=SamplingParams.from_options(options),
            sliding=options.sliding or sliding,
            autocast_dtype=autocast_dtype,
            compile=compile,
            progress=progress,
            cuda_graphs=cuda_graphs,
        )


@dataclass
class EngineStats:
    rows: int = 0  # series x sample paths in the batch
    horizon: int = 0  # steps generated
    tokens_generated: int = 0  # rows x horizon token pairs
    tokenize_seconds: float = 0.0  # encoding the history
    generate_seconds: float = 0.0  # prefill + decode steps
    detokenize_seconds: float = 0.0  # decoding tokens back to candles
    recomputed_row_steps: int = 0  # (row, step) pairs that ran a full-window forward

    @property
    def total_seconds(self) -> float:
        return self.tokenize_seconds + self.generate_seconds + self.detokenize_seconds


@dataclass
class GenerationOutput:
    s1: torch.Tensor  # (N, H) int64 generated coarse tokens
    s2: torch.Tensor  # (N, H) int64 generated fine tokens
    candles: torch.Tensor  # (N, H, 6) float32 normalized forecast of each row
    stats: EngineStats


__all__ = ["EngineStats", "GenerationConfig", "GenerationOutput", "SLIDING_MODES"]
