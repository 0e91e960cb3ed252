"""kronos_core: a checkpoint-compatible Kronos with a fast batched generation engine.

A plain library (no web or Ray imports): model, engine, predictor, data tools.
"""

from __future__ import annotations

from pathlib import Path

from kronos_core.model import CheckpointError, Kronos, KronosTokenizer
from kronos_core.predictor import ForecastResult, KronosPredictor

__version__ = "0.1.0"

ASSETS = Path(__file__).parent / "assets"
BUNDLED_MODEL_DIR = ASSETS / "models" / "kronos-tiny-model"
BUNDLED_TOKENIZER_DIR = ASSETS / "models" / "kronos-tiny-tokenizer"
BUNDLED_MAX_CONTEXT = 512
BUNDLED_DESCRIPTION = (
    "kronos-tiny: a small RANDOM-WEIGHT checkpoint in the published layout (d_model 32, 2 layers), "
    "bundled for demos and tests; its forecasts are not meaningful"
)


def load_bundled(device=None) -> tuple[Kronos, KronosTokenizer]:
    """The bundled random-weight tiny checkpoint (model, tokenizer)."""
    return (
        Kronos.from_pretrained(BUNDLED_MODEL_DIR, device=device),
        KronosTokenizer.from_pretrained(BUNDLED_TOKENIZER_DIR, device=device),
    )


__all__ = [
    "BUNDLED_MODEL_DIR", "BUNDLED_TOKENIZER_DIR", "CheckpointError", "ForecastResult", "Kronos",
    "KronosPredictor", "KronosTokenizer", "load_bundled",
]
