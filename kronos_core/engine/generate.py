"""The generation loop: tokenize once, prefill once (each series once, whatever its paths),
decode one token per step from caches.

``Generator.generate(batch, cfg)`` runs a ``Generation`` (``kronos_core.engine.job``)
to the end; a scheduler that interleaves several batches on one device drives jobs
step by step instead. Each step is cache step -> run -> sample -> append. The cache step
(``kronos_core.engine.cache_steps``, a pure function of the rows' lengths) says which rows
decode their newest token from the key/value caches, which leave the caches, and
which run over their whole window. Run gives each row's last hidden state and the s2
head's keys/values over its window; sample draws s1 from the last hidden state, then
s2 from the s2 head given that s1; append writes both to the token sequences. Modes:

* ``exact`` (default): cached while history + generated fits ``max_context``;
  a row whose window slides is recomputed over its whole window each step, as
  the reference does, so results equal the reference's.
* ``rolling``: rows keep their cache when the window slides and the oldest slot
  is dropped. Faster; approximate (deeper layers' cached keys remember tokens
  that left the window). ``kronos bench`` reports the deviation.
* ``recompute``: the reference's algorithm, a full forward over the window for
  every row at every step. The benchmark baseline.

The decode step (``kronos_core.engine.job.decode_step``) has shapes fixed by (cached
rows, cache capacity) and reads nothing back from the device. ``cfg.compile``
compiles it with dynamic shapes; ``cfg.cuda_graphs`` compiles it with
``torch.compile(mode="reduce-overhead")`` on CUDA (CUDA graphs: one compile and capture
per (rows, capacity) pair, seconds each, replayed at every step of that size by every
job of that size; up to ``GRAPH_SIZES`` sizes, after which dynamo runs new sizes
eager, and each capture keeps its own memory pool); on a CPU the flag is ignored with
a log line and the step runs as it would without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from kronos_core.base.options import SLIDING_MODES
from kronos_core.engine.batch import EngineBatch
from kronos_core.engine.config import EngineStats, GenerationConfig, GenerationOutput
from kronos_core.engine.job import Generation, decode_step
from kronos_core.engine.sampling import CandidateRoute
from kronos_core.model.kronos import Kronos
from kronos_core.model.tokenizer import KronosTokenizer

log = logging.getLogger(__name__)

# decode-step sizes (rows, capacity) compiled and captured before dynamo falls back to eager
GRAPH_SIZES = 64

CPU_GRAPHS_IGNORED = (
    "cuda_graphs is on but the device is {device}: CUDA graphs need a CUDA device; ignored, the "
    "decode step runs without them"
)


class Generator:
    """Runs ``generate`` (or hands out ``Generation``s) for one model/tokenizer pair;
    keeps the compiled decode steps between calls."""

    def __init__(self, model: Kronos, tokenizer: KronosTokenizer):
        if (model.config.s1_bits, model.config.s2_bits) != (
            tokenizer.config.s1_bits, tokenizer.config.s2_bits,
        ):
            raise ValueError(
                f"tokenizer bit widths (s1_bits={tokenizer.config.s1_bits}, "
                f"s2_bits={tokenizer.config.s2_bits}) do not match the model's "
                f"(s1_bits={model.config.s1_bits}, s2_bits={model.config.s2_bits})"
            )
        self.model, self.tokenizer = model, tokenizer
        self._compiled: Callable[..., Any] | None = None  # torch.compile(dynamic=True)
        self._graphed: Callable[..., Any] | None = None  # torch.compile(mode="reduce-overhead")
        self._warned_devices: set[str] = set()
        # the s1 and s2 draws' top-p candidate routes (speed only: the same tokens any route)
        self.candidate_routes = (CandidateRoute(), CandidateRoute())

    def graphs_active(self, cfg: GenerationConfig, device: torch.device) -> bool:
        """Whether ``cfg.cuda_graphs`` applies on ``device`` (logged once per device when it does
        not)."""
        if not cfg.cuda_graphs:
            return False
        if device.type == "cuda":
            return True
        if str(device) not in self._warned_devices:
            self._warned_devices.add(str(device))
            log.warning(CPU_GRAPHS_IGNORED.format(device=device))
        return False

    def decode_fn(self, cfg: GenerationConfig, device: torch.device) -> Callable[..., Any]:
        """The decode step to call: eager, compiled, or compiled for CUDA graphs."""
        if self.graphs_active(cfg, device):
            if self._graphed is None:
                limits = torch._dynamo.config
                # each (rows, capacity) is one compile + capture
                if limits.recompile_limit < GRAPH_SIZES:
                    log.info(
                        "cuda_graphs: torch._dynamo recompile_limit %d -> %d (one graph per "
                        "decode-step size)",
                        limits.recompile_limit, GRAPH_SIZES,
                    )
                    limits.recompile_limit = GRAPH_SIZES
                self._graphed = torch.compile(decode_step, mode="reduce-overhead", dynamic=False)
            graphed = self._graphed

            def step(*args: Any) -> Any:
                # the last replay's outputs were consumed
                torch.compiler.cudagraph_mark_step_begin()
                hidden, key_mask = graphed(*args)
                # outputs of a replay are overwritten by the next
                return hidden.clone(), key_mask.clone()

            return step
        if cfg.compile:
            if self._compiled is None:
                self._compiled = torch.compile(decode_step, dynamic=True)
            return self._compiled
        return decode_step

    def start(self, batch: EngineBatch, cfg: GenerationConfig) -> Generation:
        """A job for ``batch``, not started: its first ``step()`` tokenizes and prefills."""
        return Generation(self, batch, cfg)

    def generate(self, batch: EngineBatch, cfg: GenerationConfig) -> GenerationOutput:
        """Tokenize, then cache step -> run -> sample -> append for each step, then detokenize."""
        job = Generation(self, batch, cfg)
        while not job.done:
            job.step()
        return job.result()


__all__ = [
    "EngineStats", "GenerationConfig", "Generation", "GenerationOutput", "Generator",
    "SLIDING_MODES",
]
