"""Checkpoint-compatible Kronos modules (tokenizer and predictor)."""

from kronos_core.model.checkpoint import CheckpointError
from kronos_core.model.config import ConfigError, KronosConfig, TokenizerConfig
from kronos_core.model.kronos import Kronos
from kronos_core.model.tokenizer import KronosTokenizer

__all__ = [
    "CheckpointError", "ConfigError", "Kronos", "KronosConfig", "KronosTokenizer",
    "TokenizerConfig",
]
