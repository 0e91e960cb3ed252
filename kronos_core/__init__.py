"""kronos_core: a checkpoint-compatible Kronos with a fast batched generation engine.

A plain library (no web or Ray imports): model, engine, predictor, data tools.
"""

from __future__ import annotations

from kronos_core.loading import ModelIdentity, PredictorConfig, load_predictor
from kronos_core.model import CheckpointError, Kronos, KronosTokenizer
from kronos_core.predictor import ForecastResult, KronosPredictor

__version__ = "0.1.0"

__all__ = [
    "CheckpointError", "ModelIdentity", "PredictorConfig", "load_predictor", "ForecastResult",
    "Kronos", "KronosPredictor", "KronosTokenizer",
]
