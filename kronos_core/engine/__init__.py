"""Batched, cached generation: batch assembly, sampling, the decode loop, the memory model."""

from kronos_core.engine.batch import EngineBatch, assemble
from kronos_core.engine.generate import (
    EngineStats,
    GenerationConfig,
    GenerationOutput,
    Generator,
)
from kronos_core.engine.sampling import SamplingParams

__all__ = [
    "EngineBatch", "EngineStats", "GenerationConfig", "GenerationOutput", "Generator", "SamplingParams",
    "assemble",
]
