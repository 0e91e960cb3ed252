"""kronos_core: a checkpoint-compatible Kronos with a fast batched generation engine.

A plain library (no web or Ray imports): model, engine, predictor, data tools.
"""

from __future__ import annotations

from kronos_core.loading import ModelIdentity, PredictorConfig, load_predictor
from kronos_core.model import CheckpointError, Kronos, KronosTokenizer
from kronos_core.predictor import ForecastResult, KronosPredictor

__version__ = "0.1.0"


def load_bundled(device=None) -> tuple[Kronos, KronosTokenizer]:
    """The bundled random-weight tiny checkpoint (model, tokenizer): for tests and demos only."""
    from kronos_core.loading import PredictorConfig, load_checkpoints

    loaded = load_checkpoints(PredictorConfig(model="kronos-tiny"))
    if device is not None:
        loaded.model.to(device)
        loaded.tokenizer.to(device)
    return loaded.model, loaded.tokenizer


__all__ = [
    "CheckpointError", "ModelIdentity", "PredictorConfig", "load_predictor", "ForecastResult", "Kronos",
    "KronosPredictor", "KronosTokenizer", "load_bundled",
]
