"""``Generation``: one engine batch's generation, advanced one decode step per call.

The first ``step()`` tokenizes the history and runs step 0 (the prefill in a cached
mode); every later call runs one decode step; the last one also detokenizes. Between
calls the job holds its state (token sequences, key/value caches, the precomputed
seeded uniforms), so a scheduler can interleave the steps of several jobs on one
device, and ``close()`` frees the caches of a cancelled job at once. ``step_together`` runs the
next step of several jobs as one shared decode step (``kronos_core.engine.shared_step``).

Each step is cache step -> run -> sample -> append. The cache steps
(``kronos_core.engine.cache_steps``, a pure function of the rows' lengths) are made on the host
before the first step.

A steady-state decode step (rows cached, no eviction) reads nothing back from the
device: every width, padding flag and slot index is computed on the host from the
lengths once, the seeded uniforms of every step are made at the first step, and the
cache slot of the new token is a 0-d tensor on the device (set with ``fill_``, one
tensor per job, so a CUDA graph replays over the same address). Its tensor shapes depend
only on (cached rows, cache capacity): attention runs over every slot of the caches
with a mask, not over a prefix that grows each step. That is what lets
``GenerationConfig.cuda_graphs`` capture it (``kronos_core.engine.generate``).
``tests/engine/test_host_syncs.py`` counts the synchronising ops per step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from kronos_core.engine.batch import EngineBatch
from kronos_core.engine.cache_steps import CacheStep, cache_steps
from kronos_core.engine.config import EngineStats, GenerationConfig, GenerationOutput
from kronos_core.engine.memory import shares_history
from kronos_core.engine.sampling import (
    CandidateRoute,
    SamplingParams,
    counter_uniforms_table,
    sample_tokens,
)
from kronos_core.engine.shared_step import DecodeMember, held_slots, shared_decode_step
from kronos_core.model.config import DEP_HEADS
from kronos_core.model.kronos import Kronos
from kronos_core.model.layers import (
    DecodeCache,
    KVCache,
    SharedHistoryKV,
    padded_positions_and_mask,
)
from kronos_core.model.tokenizer import KronosTokenizer


class StepSource(Protocol):
    """What a job needs of the ``Generator`` that started it (``kronos_core.engine.generate``):
    the model pair and the decode step to call. A protocol, so that this module does not
    import the generator that imports it."""

    model: Kronos
    tokenizer: KronosTokenizer
    candidate_routes: tuple[CandidateRoute, CandidateRoute]  # the s1 and s2 draws' (speed only)

    def graphs_active(self, cfg: GenerationConfig, device: torch.device) -> bool: ...

    def decode_fn(self, cfg: GenerationConfig, device: torch.device) -> Callable[..., Any]: ...


@dataclass
class _StepInputs:
    """What the s2 head needs for a group of rows."""

    rows: torch.Tensor  # (n,) indices into the batch
    hidden_last: torch.Tensor  # (n, d) last hidden state
    # (n, 4, S, D) keys of the s2 head over the window (S: the window or the cache capacity),
    # or the s2 head's SharedHistoryKV (dep_v None)
    dep_k: torch.Tensor | SharedHistoryKV
    dep_v: torch.Tensor | None  # (n, 4, S, D)
    key_mask: torch.Tensor | None  # (n, S) True where the key is a real token in the window
    every_row: bool = False  # rows is the whole batch, in order (no scatter needed)


@dataclass
class _Sequences:
    """Token and time-feature sequences of history + generated, left-padded, one row per path."""

    s1: torch.Tensor  # (N, Lmax + H) int64
    s2: torch.Tensor  # (N, Lmax + H) int64
    stamps: torch.Tensor  # (N, Lmax + H, 5) time features of history and future
    lengths: torch.Tensor  # (N,) real history length of each row
    lmax: int  # history columns; generated token of step s goes to column lmax + s

    def append(self, step: int, s1: torch.Tensor, s2: torch.Tensor) -> None:
        """s1, s2 (N,) sampled tokens of ``step``."""
        self.s1[:, self.lmax + step], self.s2[:, self.lmax + step] = s1, s2


class _CachedRows:
    """Rows decoded from key/value caches; slots are shared by all rows (left-padded).

    ``pad_host`` (n,) padding slots of each row, known on the host; the device copies
    (``pad``, ``real``) are made once here and only re-indexed on eviction.

    ``shared_paths``: the rows come in runs of that many paths per series and no row leaves
    the caches before the end; the prefill then sets every cache to a ``SharedHistoryKV``
    (each series' history once, each row's own new tokens) instead of copying the history
    into every row.
    """

    def __init__(
        self, model: Kronos, pad_host: list[int], width: int, capacity: int, dtype: torch.dtype,
        device: torch.device, static: bool = False, shared_paths: int = 0,
    ):
        """The caches' first ``width`` slots are left for the prefill to fill (every one of
        them); the others start at zero. With ``shared_paths`` no cache is made here."""
        c = model.config
        n = len(pad_host)
        self.ids = tuple(range(n))  # batch rows held, on the host (the cache steps' row ids)
        self.pad_host, self.width, self.capacity = list(pad_host), width, capacity
        self.rows = torch.arange(n, device=device)  # (n,) batch rows held
        self.pad = torch.tensor(pad_host, dtype=torch.long, device=device)  # (n,)
        self.slots = torch.arange(capacity, device=device)  # (C,) slot indices
        # (n, C) True from each row's first real token
        self.real = self.slots[None, :] >= self.pad[:, None]
        # the decode step's new slot, set by fill_
        self.slot = torch.zeros((), dtype=torch.long, device=device)
        self.shared_paths = shared_paths
        self.caches: list[DecodeCache] = []
        self.dep: DecodeCache
        if not shared_paths:
            self.caches = [
                KVCache(n, c.n_heads, capacity, c.head_dim, dtype, device, written=width)
                for _ in range(c.n_layers)
            ]
            self.dep = KVCache(
                n, DEP_HEADS, capacity, c.d_model // DEP_HEADS, dtype, device, written=width
            )
        self.static = static
        if static:
            self._mark_static()

    @property
    def padded(self) -> bool:
        return max(self.pad_host) > 0

    def _mark_static(self) -> None:
        """Tell torch.compile these tensors keep their addresses (CUDA graphs replay over them, no
        copies)."""
        for t in (*self.tensors(), self.pad, self.real, self.slots, self.slot):
            torch._dynamo.mark_static_address(t)

    def evict(self, leaving: tuple[int, ...]) -> None:
        """Drop the batch rows ``leaving`` from every cache."""
        if self.shared_paths:
            raise RuntimeError("rows of shared-history caches never leave them")
        gone = set(leaving)
        keep = [i for i, r in enumerate(self.ids) if r not in gone]  # positions within the caches
        self.ids = tuple(self.ids[i] for i in keep)
        self.pad_host = [self.pad_host[i] for i in keep]
        idx = torch.tensor(keep, dtype=torch.long, device=self.rows.device)  # (n',)
        self.rows, self.pad, self.real = self.rows[idx], self.pad[idx], self.real[idx]
        for cache in (*self.caches, self.dep):
            assert isinstance(cache, KVCache)
            cache.select_rows(idx)
        if self.static:
            self._mark_static()

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the caches hold (for tests and memory accounting)."""
        if not self.caches:
            return []
        return [t for cache in (*self.caches, self.dep) for t in cache.tensors()]


def decode_step(
    model: Kronos,
    s1: torch.Tensor,
    s2: torch.Tensor,
    stamp: torch.Tensor,
    slot: torch.Tensor,
    pad: torch.Tensor,
    real: torch.Tensor,
    slots: torch.Tensor,
    caches: Sequence[DecodeCache],
    dep: DecodeCache,
    max_context: int,
    rolling: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One new token per cached row through the caches; shapes fixed by (n, capacity C).

    s1, s2 (n, 1) int64 newest tokens; stamp (n, 1, 5); slot 0-d int64 on the device
    (the new token's cache slot); pad (n,); real (n, C) slots at or after each row's
    first real token; slots (C,) = arange(C). Writes the trunk's and the s2 head's
    keys/values at ``slot``. Returns hidden (n, 1, d) and the s2 head's key mask (n, C).
    """
    key_mask = held_slots(real, slots, slot, max_context, rolling)  # (n, C)
    positions = (slot - pad)[:, None]  # (n, 1)
    # (n, 1, d)
    hidden = model.trunk(
        model.embed(s1, s2, stamp), positions, key_mask[:, None, None, :], caches, slot
    )
    k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, 1, D)
    dep.write_at(slot, k, v)
    return hidden, key_mask


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


class Generation:
    """One engine batch's generation, advanced one decode step per call (tokenize + prefill on the
    first).

    ``Generator.generate(batch, cfg)`` is ``job = Generation(...); while not job.done:
    job.step(); return job.result()``: a job stepped in any interleaving with other jobs
    gives exactly what ``generate`` gives (seeded draws depend only on row keys and steps).
    """

    def __init__(self, generator: StepSource, batch: EngineBatch, cfg: GenerationConfig):
        if batch.horizon != cfg.horizon:
            raise ValueError(
                f"batch has {batch.horizon} future stamps, config asks for horizon {cfg.horizon}"
            )
        self.generator, self.batch, self.cfg = generator, batch, cfg
        self.model = generator.model
        self.device = batch.x.device
        self.rows: int = batch.rows
        # once: the cache steps are made on the host
        self.lengths_host = [int(n) for n in batch.lengths.tolist()]
        self.cache_steps: list[CacheStep] = cache_steps(
            self.lengths_host, cfg.horizon, cfg.max_context, cfg.sliding
        )
        self.stats = EngineStats(
            rows=self.rows, horizon=cfg.horizon, tokens_generated=self.rows * cfg.horizon
        )
        # the paths of a series attend to one copy of its history when every row stays cached
        # to the end (``shares_history``, as the memory model counts it) and the decode step is
        # the eager one
        self.shares_history = not cfg.compile and not cfg.cuda_graphs and shares_history(
            batch.paths, max(self.lengths_host), cfg.horizon, cfg.max_context, cfg.sliding
        )
        self._step = 0
        self._seqs: _Sequences | None = None
        self._cached: _CachedRows | None = None
        self._uniforms: torch.Tensor | None = None  # (H, 2, N) float64 seeded draws, on the device
        # recompute row sets, made once each
        self._row_index: dict[tuple[int, ...], torch.Tensor] = {}
        self._candles: torch.Tensor | None = None
        self._closed = False
        self._bar: Any = None

    # ---- the API a scheduler drives ---------------------------------------------------
    @property
    def done(self) -> bool:
        """Every step generated (and detokenized)."""
        return self._candles is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def steps_left(self) -> int:
        return self.cfg.horizon - self._step

    def step(self) -> None:
        """Advance one decode step (the first also tokenizes and prefills; the last detokenizes)."""
        self._check_steppable()
        with torch.inference_mode(), _autocast(self.device, self.cfg.autocast_dtype):
            if self._seqs is None:
                self._start()
            t0 = time.perf_counter()
            this_step = self.cache_steps[self._step]
            self._end_step(this_step, self._run(this_step), t0)

    @property
    def shares_steps(self) -> bool:
        """Whether the next step can run in a shared decode step with other jobs
        (``step_together``): the job is prefilled, its next step decodes cached rows, and its
        decode step is the eager one (a compiled or CUDA-graph step runs alone)."""
        if self._closed or self.done or self._seqs is None or self._cached is None:
            return False
        this_step = self.cache_steps[self._step]
        if this_step.prefill or not this_step.cached or self._cached.static:
            return False
        return self.generator.decode_fn(self.cfg, self.device) is decode_step

    def _check_steppable(self) -> None:
        if self._closed:
            raise RuntimeError("this generation job was closed")
        if self.done:
            raise RuntimeError("this generation job is done; read result()")

    def _end_step(
        self,
        this_step: CacheStep,
        groups: list[_StepInputs],
        t0: float,
        tokens: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """Sample the step's tokens from ``groups`` (unless ``tokens`` (s1, s2) were drawn with
        other jobs' by ``step_together``), append them, count the step (the last one
        detokenizes)."""
        s1, s2 = self._sample(groups, this_step.step) if tokens is None else tokens
        assert self._seqs is not None
        self._seqs.append(this_step.step, s1, s2)
        self.stats.recomputed_row_steps += len(this_step.recompute)
        self.stats.generate_seconds += time.perf_counter() - t0
        self._step += 1
        if self._bar is not None:
            self._bar.update(1)
        if self._step == self.cfg.horizon:
            self._finish()

    def result(self) -> GenerationOutput:
        """The generated tokens and candles; only when ``done``."""
        if not self.done:
            raise RuntimeError(f"generation not done: {self.steps_left} steps left" +
                               (" (closed)" if self._closed else ""))
        assert self._seqs is not None and self._candles is not None
        seqs = self._seqs
        return GenerationOutput(
            seqs.s1[:, seqs.lmax :], seqs.s2[:, seqs.lmax :], self._candles, self.stats
        )

    def close(self) -> None:
        """Free the caches and sequences now (a cancelled job); further ``step()`` calls raise."""
        self._closed = True
        self._cached = None
        if not self.done:
            self._seqs = None
        self._uniforms = None
        self._row_index.clear()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def cache_tensors(self) -> list[torch.Tensor]:
        """The key/value cache tensors the job holds now (empty before the prefill, after the end or
        close)."""
        return [] if self._cached is None else self._cached.tensors()

    # ---- first and last step ------------------------------------------------------------
    def _start(self) -> None:
        """Tokenize the history, lay out room for the horizon, precompute the seeded draws."""
        t0 = time.perf_counter()
        self._seqs = self._tokenize()
        self.stats.tokenize_seconds += time.perf_counter() - t0
        keys = self.batch.row_keys
        if keys is not None:
            table = counter_uniforms_table(keys, self.cfg.horizon)  # (H, 2, N) float64, on the host
            self._uniforms = torch.from_numpy(table).to(self.device)  # one copy to the device
        if self.cfg.progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.cfg.horizon, desc="generating", unit="step", leave=False)

    def _finish(self) -> None:
        self._cached = None  # free the caches before the decoder runs
        self._uniforms = None
        self._row_index.clear()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        t0 = time.perf_counter()
        self._candles = self._detokenize()  # (N, H, 6)
        self.stats.detokenize_seconds += time.perf_counter() - t0

    def _tokenize(self) -> _Sequences:
        batch = self.batch
        padded = max(self.lengths_host) > min(self.lengths_host)
        first = slice(None, None, batch.paths)  # one row of each series' run of paths
        # (B, Lmax) each: every series once
        s1, s2 = self.generator.tokenizer.encode(
            batch.x[first], batch.pad[first] if padded else None
        )
        if batch.paths > 1:  # (N, Lmax): the same tokens on each of its paths
            s1 = s1.repeat_interleave(batch.paths, 0)
            s2 = s2.repeat_interleave(batch.paths, 0)
        room = s1.new_zeros(batch.rows, batch.horizon)  # (N, H)
        stamps = torch.cat([batch.x_stamp, batch.y_stamp], dim=1)  # (N, Lmax + H, 5)
        return _Sequences(
            torch.cat([s1, room], 1), torch.cat([s2, room], 1), stamps, batch.lengths, s1.shape[1]
        )

    def _detokenize(self) -> torch.Tensor:
        """Decode each row's last window in one causal pass (its history part once per series
        when it has several paths); keep the horizon -> (N, H, 6) float32."""
        assert self._seqs is not None
        seqs, horizon, mc = self._seqs, self.cfg.horizon, self.cfg.max_context
        total = seqs.lmax + horizon
        windows = [min(n + horizon, mc) for n in self.lengths_host]
        width = max(windows)
        pad = width - torch.clamp(seqs.lengths + horizon, max=mc)  # (N,)
        padded = min(windows) < width
        paths = self.batch.paths
        if paths > 1 and width > horizon:
            # the paths of a series share the window's history part: the decoder runs over it
            # once per series, then over each path's own horizon
            first = slice(None, None, paths)
            hist = slice(total - width, total - horizon)
            decoded = self.generator.tokenizer.decode_after_shared_history(
                (seqs.s1[first, hist], seqs.s2[first, hist]),
                (seqs.s1[:, total - horizon :], seqs.s2[:, total - horizon :]),
                pad[first] if padded else None, paths,
            )
            return decoded.float()  # (N, H, 6)
        cols = slice(total - width, total)
        decoded = self.generator.tokenizer.decode(
            seqs.s1[:, cols], seqs.s2[:, cols], pad if padded else None
        )
        return decoded[:, -horizon:].float()  # (N, H, 6)

    # ---- one step -------------------------------------------------------------------------
    def _run(self, this_step: CacheStep) -> list[_StepInputs]:
        """Carry out a cache step -> groups of rows with their s2-head inputs."""
        groups: list[_StepInputs] = []
        if this_step.prefill:
            groups.append(self._prefill())
        elif this_step.cached:
            assert self._cached is not None
            if this_step.evict:
                self._cached.evict(this_step.evict)
            groups.append(self._decode(self._cached, this_step))
        else:
            self._cached = None  # no row is cached any more: free the caches
        if this_step.recompute:
            groups.append(self._recompute(this_step.recompute, this_step.step))
        return groups

    def _sample(self, groups: list[_StepInputs], step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """s1 from every row's last hidden state, then s2 given that s1 -> (s1, s2) each (N,)."""
        model, n_rows, sampling = self.model, self.rows, self.cfg.sampling
        if len(groups) == 1 and groups[0].every_row:
            return _draw_tokens(model, sampling, [(self, step, groups[0])])[0]
        # cached and recomputed rows: each group's rows scattered to their places in the batch
        first = groups[0].hidden_last
        hidden_last = first.new_empty(n_rows, first.shape[-1])  # (N, d)
        for g in groups:
            hidden_last[g.rows] = g.hidden_last
        routes = self.generator.candidate_routes
        # (N,)
        s1 = sample_tokens(model.s1_logits(hidden_last), sampling, self._draws(step, 0), routes[0])
        logits2: torch.Tensor | None = None
        for g in groups:
            # (n, V2)
            part = model.s2_logits(g.hidden_last, s1[g.rows], g.dep_k, g.dep_v, g.key_mask)
            if logits2 is None:
                logits2 = part.new_empty(n_rows, part.shape[-1])  # (N, V2)
            logits2[g.rows] = part
        assert logits2 is not None
        s2 = sample_tokens(logits2, sampling, self._draws(step, 1), routes[1])  # (N,)
        return s1, s2

    def _draws(self, step: int, kind: int) -> torch.Tensor | None:
        """(N,) float64 seeded uniforms of (step, kind) on the device, or None (global RNG)."""
        return None if self._uniforms is None else self._uniforms[step, kind]

    def _prefill(self) -> _StepInputs:
        """Run every row's first window once, filling the caches -> step-0 inputs."""
        assert self._seqs is not None
        seqs, model, mc = self._seqs, self.model, self.cfg.max_context
        windows = [min(n, mc) for n in self.lengths_host]
        width = max(windows)
        pad_host = [width - w for w in windows]
        cols = slice(seqs.lmax - width, seqs.lmax)
        static = self.generator.graphs_active(self.cfg, self.device)
        dtype = self.cfg.autocast_dtype or torch.float32
        paths = self.batch.paths
        shared = paths if self.shares_history and not static else 0
        state = _CachedRows(
            model, pad_host, width, width + self.cfg.horizon, dtype, self.device, static, shared
        )
        self._cached = state
        # the paths of one series share its history: run each series once (B = N / paths rows)
        rows = slice(None, None, paths)
        c = model.config
        caches = state.caches if paths == 1 else [
            KVCache(
                len(pad_host) // paths, c.n_heads, width, c.head_dim, dtype, self.device,
                written=width,
            )
            for _ in range(c.n_layers)
        ]
        # (B, W), (B, 1, W, W) | None
        positions, mask = padded_positions_and_mask(state.pad[rows], width, state.padded)
        # (B, W, d)
        x = model.embed(seqs.s1[rows, cols], seqs.s2[rows, cols], seqs.stamps[rows, cols])
        hidden = model.trunk(x, positions, mask, caches, 0)  # (B, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (B, 4, W, D)
        last = hidden[:, -1]  # (B, d)
        if paths > 1:
            last = last.repeat_interleave(paths, 0)  # (N, d)
        if shared:  # each series' history once, each row's own tokens beside it
            horizon = self.cfg.horizon
            real = state.real[rows, :width] if state.padded else None  # (B, W) or None
            state.caches = [
                SharedHistoryKV(its.k, its.v, paths, horizon, real)
                for its in cast(list[KVCache], caches)
            ]
            state.dep = dep = SharedHistoryKV(k, v, paths, horizon, real)
            # (N, C): the history's real slots, none of the rows' own yet
            held = state.real & (state.slots < width)[None, :]
            return _StepInputs(state.rows, last, dep, None, held, every_row=True)
        dep_cache = cast(KVCache, state.dep)
        if paths > 1:  # spread each series' caches and keys over its paths
            for mine, its in zip(state.caches, caches, strict=True):
                cast(KVCache, mine).write_spread(cast(KVCache, its).k, cast(KVCache, its).v, paths)
            dep_cache.write_spread(k, v, paths)  # (N, 4, W, D) in the cache
        else:
            dep_cache.write(0, k, v)
        key_mask = state.real[:, :width] if state.padded else None  # (N, W) or None
        return _StepInputs(
            state.rows, last, dep_cache.k[:, :, :width], dep_cache.v[:, :, :width],
            key_mask, every_row=True,
        )

    def _decode(self, state: _CachedRows, this_step: CacheStep) -> _StepInputs:
        """Feed each cached row's newest token (column lmax + step - 1) through the caches."""
        m = self._decode_member(state, this_step)
        step_fn = self.generator.decode_fn(self.cfg, self.device)
        hidden, key_mask = step_fn(
            self.model, m.s1, m.s2, m.stamp, m.slot, m.pad, m.real, m.slots, m.caches, m.dep,
            m.max_context, m.rolling,
        )  # (n, 1, d), (n, C)
        return self._decoded(state, hidden, key_mask)

    def _decode_member(self, state: _CachedRows, this_step: CacheStep) -> DecodeMember:
        """The cached rows' inputs of this step's decode: each row's newest token (column
        lmax + step - 1), the new token's slot (a 0-d tensor, set with no host read), the
        caches."""
        assert self._seqs is not None
        seqs, rows = self._seqs, state.rows
        slot = state.slot.fill_(state.width + this_step.step - 1)
        end = seqs.lmax + this_step.step
        col = slice(end - 1, end)
        if len(state.ids) == self.rows:  # nothing evicted: rows is arange(N)
            # (N, 1), (N, 1), (N, 1, 5)
            s1, s2, stamp = seqs.s1[:, col], seqs.s2[:, col], seqs.stamps[:, col]
        else:
            # (n, 1) ...
            s1, s2, stamp = seqs.s1[rows, col], seqs.s2[rows, col], seqs.stamps[rows, col]
        return DecodeMember(
            s1, s2, stamp, slot, state.pad, state.real, state.slots, state.caches, state.dep,
            self.cfg.max_context, this_step.trim_window,
        )

    def _decoded(
        self, state: _CachedRows, hidden: torch.Tensor, key_mask: torch.Tensor
    ) -> _StepInputs:
        """The s2 head's inputs of the cached rows from their decode step's hidden (n, 1, d)
        and key mask (n, C)."""
        every_row = len(state.ids) == self.rows
        dep = state.dep
        if isinstance(dep, SharedHistoryKV):
            return _StepInputs(state.rows, hidden[:, 0], dep, None, key_mask, every_row=every_row)
        return _StepInputs(state.rows, hidden[:, 0], dep.k, dep.v, key_mask, every_row=every_row)

    def _rows_tensor(self, rows: tuple[int, ...]) -> torch.Tensor:
        """(n,) int64 batch rows on the device, made once per distinct row set."""
        index = self._row_index.get(rows)
        if index is None:
            index = self._row_index[rows] = torch.tensor(rows, dtype=torch.long, device=self.device)
        return index

    def _recompute(self, row_ids: tuple[int, ...], step: int) -> _StepInputs:
        """Full forward over each row's window (positions restart at 0), no cache."""
        assert self._seqs is not None
        seqs, model, mc = self._seqs, self.model, self.cfg.max_context
        rows = self._rows_tensor(row_ids)  # (n,)
        end = seqs.lmax + step  # column after each row's newest token
        windows = [min(self.lengths_host[r] + step, mc) for r in row_ids]
        width = max(windows)
        padded = min(windows) < width
        pad = width - torch.clamp(seqs.lengths[rows] + step, max=mc)  # (n,)
        cols = slice(end - width, end)
        # (n, W), (n, 1, W, W) or None
        positions, mask = padded_positions_and_mask(pad, width, padded)
        # (n, W, d)
        x = model.embed(seqs.s1[rows, cols], seqs.s2[rows, cols], seqs.stamps[rows, cols])
        hidden = model.trunk(x, positions, mask)  # (n, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, W, D)
        # (n, W)
        key_mask = (
            torch.arange(width, device=rows.device)[None, :] >= pad[:, None] if padded else None
        )
        return _StepInputs(rows, hidden[:, -1], k, v, key_mask, every_row=len(row_ids) == self.rows)


def step_together(jobs: Sequence[Generation]) -> None:
    """Advance every job in ``jobs`` one step, their cached rows in one shared decode step
    (``kronos_core.engine.shared_step``); each job then draws its tokens with its own options and
    seeded draws (jobs with equal options in one batch, ``_sample_together``), so each gives
    exactly what it gives stepped alone.

    Every job must ``shares_steps``, and all must run the same model on the same device with
    the same autocast dtype (``ValueError`` otherwise, before any job moves). One job is
    ``step()``.
    """
    if len(jobs) <= 1:
        for job in jobs:
            job.step()
        return
    first = jobs[0]
    for job in jobs:
        job._check_steppable()
        if not job.shares_steps:
            raise ValueError("a job whose next step is not a plain cached decode cannot share it")
        if (job.model, job.device, job.cfg.autocast_dtype) != (
            first.model, first.device, first.cfg.autocast_dtype
        ):
            raise ValueError("jobs share a decode step only on one model, device and dtype")
    if len({id(job) for job in jobs}) != len(jobs):
        raise ValueError("a job appears twice in one shared step")
    with torch.inference_mode(), _autocast(first.device, first.cfg.autocast_dtype):
        t0 = time.perf_counter()
        begun: list[tuple[Generation, CacheStep, _CachedRows]] = []
        for job in jobs:
            this_step, state = job.cache_steps[job._step], job._cached
            assert state is not None
            if this_step.evict:
                state.evict(this_step.evict)
            begun.append((job, this_step, state))
        members = [job._decode_member(state, this_step) for job, this_step, state in begun]
        outputs = shared_decode_step(first.model, members)
        stepped: list[tuple[Generation, CacheStep, list[_StepInputs]]] = []
        for (job, this_step, state), (hidden, key_mask) in zip(begun, outputs):
            groups = [job._decoded(state, hidden, key_mask)]
            if this_step.recompute:
                groups.append(job._recompute(this_step.recompute, this_step.step))
            stepped.append((job, this_step, groups))
        drawn = _sample_together(first.model, stepped)
        for i, (job, this_step, groups) in enumerate(stepped):
            job._end_step(this_step, groups, t0, drawn.get(i))


def _sample_together(
    model: Kronos, stepped: Sequence[tuple[Generation, CacheStep, list[_StepInputs]]]
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The tokens of a shared step's jobs that can be drawn together -> {index in ``stepped``:
    (s1, s2)}; the others sample alone (``Generation._sample``).

    Jobs whose rows were all decoded from their caches (one group of every row), with equal
    sampling options and seeded draws (or greedy), draw as one batch: one s1 and one s2 head
    product and one ``sample_tokens`` call each for all their rows, the s2 head's attention once
    per job over its own keys. Each row draws with its own job's uniforms of that job's step, and
    every operation acts on each row alone, so each job gets the tokens it gets sampling alone
    (``tests/engine/test_shared_step.py``). Unseeded draws come from the global generator in
    call order, so those jobs sample alone, as they would.
    """
    buckets: dict[SamplingParams, list[int]] = {}
    for i, (job, _this_step, groups) in enumerate(stepped):
        sampling = job.cfg.sampling
        if len(groups) == 1 and groups[0].every_row and (
            job._uniforms is not None or sampling.greedy
        ):
            buckets.setdefault(sampling, []).append(i)
    drawn: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for sampling, idx in buckets.items():
        if len(idx) < 2:
            continue
        parts = [(stepped[i][0], stepped[i][1].step, stepped[i][2][0]) for i in idx]
        for i, tokens in zip(idx, _draw_tokens(model, sampling, parts)):
            drawn[i] = tokens
    return drawn


def _draw_tokens(
    model: Kronos, sampling: SamplingParams, parts: list[tuple[Generation, int, _StepInputs]]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(s1, s2) of each (job, its step, its one group of every row) in ``parts``, drawn as one
    batch: a job sampling alone (one part, ``Generation._sample``) or jobs with equal options
    (``_sample_together``, whose parts are all seeded or greedy). s1 from every row's last hidden
    state, then s2 given that s1."""
    bounds = [0]
    for _job, _step, g in parts:
        bounds.append(bounds[-1] + g.hidden_last.shape[0])
    spans = list(zip(bounds, bounds[1:]))
    hidden = [g.hidden_last for _j, _s, g in parts]  # (n, d) each
    hidden_last = hidden[0].contiguous() if len(hidden) == 1 else torch.cat(hidden)  # (N, d)

    def draws(kind: int) -> torch.Tensor | None:
        if sampling.greedy:
            return None  # an arg-max: no draw
        rows = [job._draws(step, kind) for job, step, _g in parts]  # (n,) each, or None
        present = [d for d in rows if d is not None]
        if len(present) < len(rows):
            return None  # unseeded: one job alone, drawing from the global generator
        return present[0] if len(present) == 1 else torch.cat(present)  # (N,)

    routes = parts[0][0].generator.candidate_routes
    s1 = sample_tokens(model.s1_logits(hidden_last), sampling, draws(0), routes[0])  # (N,)
    logits2 = model.s2_logits_of_groups(
        hidden_last, s1,
        [(a, b, g.dep_k, g.dep_v, g.key_mask) for (a, b), (_j, _s, g) in zip(spans, parts)],
    )  # (N, V2)
    s2 = sample_tokens(logits2, sampling, draws(1), routes[1])  # (N,)
    return [(s1[a:b], s2[a:b]) for a, b in spans]


__all__ = ["Generation", "decode_step", "step_together"]
