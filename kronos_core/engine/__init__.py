"""Batched, cached generation: batch assembly, sampling, the step-wise decode job, the memory
model."""

from kronos_core.engine.batch import EngineBatch, assemble
from kronos_core.engine.config import EngineStats, GenerationConfig, GenerationOutput
from kronos_core.engine.generate import Generator
from kronos_core.engine.job import Generation
from kronos_core.engine.sampling import SamplingParams

__all__ = [
    "EngineBatch", "EngineStats", "GenerationConfig", "Generation", "GenerationOutput", "Generator",
    "SamplingParams", "assemble",
]
