"""The generation loop: tokenize once, prefill once, decode one token per step from caches.

Each step is plan -> run -> sample -> append. The plan (``kronos_core.engine.plan``,
a pure function of the rows' lengths) says which rows decode their newest token
from the key/value caches, which leave the caches, and which run over their whole
window. Run gives each row's last hidden state and the s2 head's keys/values over
its window; sample draws s1 from the last hidden state, then s2 from the s2 head
given that s1; append writes both to the token sequences. Modes:

* ``exact`` (default): cached while history + generated fits ``max_context``;
  a row whose window slides is recomputed over its whole window each step, as
  the reference does, so results equal the reference's.
* ``rolling``: rows keep their cache when the window slides and the oldest slot
  is dropped. Faster; approximate (deeper layers' cached keys remember tokens
  that left the window). ``kronos bench`` reports the deviation.
* ``recompute``: the reference's algorithm, a full forward over the window for
  every row at every step. The benchmark baseline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from kronos_core.engine.batch import EngineBatch
from kronos_core.engine.plan import SLIDING_MODES, StepPlan, plan_step
from kronos_core.engine.sampling import SamplingParams, counter_uniforms, sample_tokens
from kronos_core.model.config import DEP_HEADS
from kronos_core.model.kronos import Kronos
from kronos_core.model.layers import KVCache, padded_positions_and_mask
from kronos_core.model.tokenizer import KronosTokenizer
from kronos_core.options import ForecastOptions


@dataclass(frozen=True)
class GenerationConfig:
    horizon: int  # candles to generate
    max_context: int = 512  # longest window the model sees
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sliding: str = "exact"  # one of SLIDING_MODES
    autocast_dtype: torch.dtype | None = None  # torch.bfloat16 / torch.float16 on GPU; None = float32
    compile: bool = False  # torch.compile the single-token decode step
    progress: bool = False  # tqdm bar over the decode steps

    def __post_init__(self):
        if self.horizon < 1:
            raise ValueError(f"horizon (pred_len) must be >= 1, got {self.horizon}")
        if self.max_context < 1:
            raise ValueError(f"max_context must be >= 1, got {self.max_context}")
        if self.sliding not in SLIDING_MODES:
            raise ValueError(f"sliding must be one of {SLIDING_MODES}, got {self.sliding!r}")

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
    ) -> GenerationConfig:
        """The engine's config for one forecast: horizon and sampling from ``options``, the rest
        from the predictor. ``sliding`` is the predictor's mode, used when ``options.sliding`` is None."""
        return cls(
            horizon=options.horizon,
            max_context=max_context,
            sampling=SamplingParams.from_options(options),
            sliding=options.sliding or sliding,
            autocast_dtype=autocast_dtype,
            compile=compile,
            progress=progress,
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


@dataclass
class _StepInputs:
    """What the s2 head needs for a group of rows."""

    rows: torch.Tensor  # (n,) indices into the batch
    hidden_last: torch.Tensor  # (n, d) last hidden state
    dep_k: torch.Tensor  # (n, 4, S, D) keys of the s2 head over the window
    dep_v: torch.Tensor  # (n, 4, S, D)
    key_mask: torch.Tensor | None  # (n, S) True where the key is a real token in the window


class _CachedRows:
    """Rows decoded from key/value caches; slots are shared by all rows (left-padded)."""

    def __init__(self, model: Kronos, rows: torch.Tensor, pad: torch.Tensor, width: int, capacity: int, dtype):
        c = model.config
        n, dev = rows.numel(), rows.device
        self.ids = tuple(range(n))  # batch rows held, on the host (the plan's row ids)
        self.rows, self.pad, self.width = rows, pad, width  # rows, pad (n,) on the device
        self.caches = [KVCache(n, c.n_heads, capacity, c.head_dim, dtype, dev) for _ in range(c.n_layers)]
        self.dep = KVCache(n, DEP_HEADS, capacity, c.d_model // DEP_HEADS, dtype, dev)

    def evict(self, leaving: tuple[int, ...]) -> None:
        """Drop the batch rows ``leaving`` from every cache."""
        gone = set(leaving)
        keep = [i for i, r in enumerate(self.ids) if r not in gone]  # positions within the caches
        self.ids = tuple(self.ids[i] for i in keep)
        idx = torch.tensor(keep, dtype=torch.long, device=self.rows.device)  # (n',)
        self.rows, self.pad = self.rows[idx], self.pad[idx]
        for cache in (*self.caches, self.dep):
            cache.select_rows(idx)

    def key_mask(self, newest: int, max_context: int, rolling: bool) -> torch.Tensor | None:
        """(n, newest + 1) True for the slots each row's window holds; None if all do."""
        slots = torch.arange(newest + 1, device=self.pad.device)
        mask = slots[None, :] >= self.pad[:, None]
        if rolling and newest + 1 > max_context:
            mask = mask & (slots[None, :] > newest - max_context)
        elif int(self.pad.max()) == 0:
            return None
        return mask


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def decode_step_forward(model: Kronos, s1, s2, stamp, positions, mask, caches, slot: int) -> torch.Tensor:
    """Trunk forward of one new token per row through the caches -> hidden (n, 1, d)."""
    return model.trunk(model.embed(s1, s2, stamp), positions, mask, caches, slot)


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


class Generator:
    """Runs ``generate`` for one model/tokenizer pair; keeps the compiled step between calls."""

    def __init__(self, model: Kronos, tokenizer: KronosTokenizer):
        if (model.config.s1_bits, model.config.s2_bits) != (tokenizer.config.s1_bits, tokenizer.config.s2_bits):
            raise ValueError(
                f"tokenizer bit widths (s1_bits={tokenizer.config.s1_bits}, s2_bits={tokenizer.config.s2_bits}) "
                f"do not match the model's (s1_bits={model.config.s1_bits}, s2_bits={model.config.s2_bits})"
            )
        self.model, self.tokenizer = model, tokenizer
        self._compiled: Callable[..., torch.Tensor] | None = None  # torch.compile of decode_step_forward

    def _decode_fn(self, compile: bool):
        if not compile:
            return decode_step_forward
        if self._compiled is None:
            self._compiled = torch.compile(decode_step_forward, dynamic=True)
        return self._compiled

    @torch.inference_mode()
    def generate(self, batch: EngineBatch, cfg: GenerationConfig) -> GenerationOutput:
        """Tokenize, then plan -> run -> sample -> append for each step, then detokenize."""
        if batch.horizon != cfg.horizon:
            raise ValueError(f"batch has {batch.horizon} future stamps, config asks for horizon {cfg.horizon}")
        n_rows, horizon = batch.rows, cfg.horizon
        stats = EngineStats(rows=n_rows, horizon=horizon, tokens_generated=n_rows * horizon)
        lengths_host = batch.lengths.tolist()
        with _autocast(batch.x.device, cfg.autocast_dtype):
            t0 = time.perf_counter()
            seqs = self._tokenize(batch)
            stats.tokenize_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            cached: _CachedRows | None = None
            steps: Iterable[int] = range(horizon)
            if cfg.progress:
                from tqdm.auto import tqdm

                steps = tqdm(steps, desc="generating", unit="step", leave=False)
            for step in steps:
                plan = plan_step(lengths_host, step, cfg.max_context, cfg.sliding)
                cached, groups = self._run(plan, seqs, cached, cfg)
                s1, s2 = self._sample(groups, batch, step, cfg)
                seqs.append(step, s1, s2)
                stats.recomputed_row_steps += len(plan.recompute)
            cached = None  # free the caches before the decoder runs
            stats.generate_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            candles = self._detokenize(seqs, horizon, cfg.max_context)  # (N, H, 6)
            stats.detokenize_seconds = time.perf_counter() - t0
        return GenerationOutput(seqs.s1[:, seqs.lmax :], seqs.s2[:, seqs.lmax :], candles, stats)

    def _tokenize(self, batch: EngineBatch) -> _Sequences:
        """Encode the history and lay out room for the horizon's tokens."""
        pad = batch.pad
        s1, s2 = self.tokenizer.encode(batch.x, pad if int(pad.max()) > 0 else None)  # (N, Lmax) each
        room = s1.new_zeros(batch.rows, batch.horizon)  # (N, H)
        stamps = torch.cat([batch.x_stamp, batch.y_stamp], dim=1)  # (N, Lmax + H, 5)
        return _Sequences(torch.cat([s1, room], 1), torch.cat([s2, room], 1), stamps, batch.lengths, s1.shape[1])

    def _run(self, plan: StepPlan, seqs: _Sequences, cached: _CachedRows | None, cfg: GenerationConfig):
        """Carry out a step's plan -> (caches left, groups of rows with their s2-head inputs)."""
        groups: list[_StepInputs] = []
        if plan.prefill:
            cached, first = self._prefill(seqs, cfg)
            groups.append(first)
        elif plan.cached:
            assert cached is not None  # a cached step follows the prefill that made the caches
            if plan.evict:
                cached.evict(plan.evict)
            groups.append(self._decode(cached, seqs, plan, cfg))
        else:
            cached = None  # no row is cached any more: free the caches
        if plan.recompute:
            rows = torch.tensor(plan.recompute, dtype=torch.long, device=seqs.s1.device)  # (n,)
            groups.append(self._recompute(rows, seqs, plan.step, cfg.max_context))
        return cached, groups

    def _sample(self, groups: list[_StepInputs], batch: EngineBatch, step: int, cfg: GenerationConfig):
        """s1 from every row's last hidden state, then s2 given that s1 -> (s1, s2) each (N,)."""
        model, n_rows = self.model, batch.rows
        first = groups[0].hidden_last
        hidden_last = first.new_empty(n_rows, first.shape[-1])  # (N, d)
        for g in groups:
            hidden_last[g.rows] = g.hidden_last
        s1 = sample_tokens(model.s1_logits(hidden_last), cfg.sampling, self._uniforms(batch, step, 0))  # (N,)
        logits2 = None
        for g in groups:
            part = model.s2_logits(g.hidden_last, s1[g.rows], g.dep_k, g.dep_v, g.key_mask)  # (n, V2)
            if logits2 is None:
                logits2 = part.new_empty(n_rows, part.shape[-1])  # (N, V2)
            logits2[g.rows] = part
        assert logits2 is not None  # groups is never empty
        s2 = sample_tokens(logits2, cfg.sampling, self._uniforms(batch, step, 1))  # (N,)
        return s1, s2

    def _detokenize(self, seqs: _Sequences, horizon: int, max_context: int) -> torch.Tensor:
        """Decode each row's last window in one causal pass; keep the horizon -> (N, H, 6) float32."""
        total = seqs.lmax + horizon
        window = torch.clamp(seqs.lengths + horizon, max=max_context)  # (N,)
        width = int(window.max())
        pad = width - window  # (N,)
        cols = slice(total - width, total)
        decoded = self.tokenizer.decode(seqs.s1[:, cols], seqs.s2[:, cols], pad if int(pad.max()) > 0 else None)
        return decoded[:, -horizon:].float()  # (N, H, 6)

    @staticmethod
    def _uniforms(batch: EngineBatch, step: int, kind: int) -> torch.Tensor | None:
        return None if batch.row_keys is None else counter_uniforms(batch.row_keys, step, kind)

    def _prefill(self, seqs: _Sequences, cfg: GenerationConfig):
        """Run every row's first window once, filling the caches. Returns (state, step-0 inputs)."""
        model, lmax, mc = self.model, seqs.lmax, cfg.max_context
        window = torch.clamp(seqs.lengths, max=mc)  # (N,)
        width = int(window.max())
        pad = width - window  # (N,)
        cols = slice(lmax - width, lmax)
        rows = torch.arange(seqs.s1.shape[0], device=seqs.s1.device)  # (N,)
        state = _CachedRows(model, rows, pad, width, width + cfg.horizon, cfg.autocast_dtype or torch.float32)
        positions, mask = padded_positions_and_mask(pad, width)  # (N, W), (N, 1, W, W) or None
        x = model.embed(seqs.s1[:, cols], seqs.s2[:, cols], seqs.stamps[:, cols])  # (N, W, d)
        hidden = model.trunk(x, positions, mask, state.caches, 0)  # (N, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (N, 4, W, D)
        state.dep.write(0, k, v)
        key_mask = state.key_mask(width - 1, mc, rolling=False)  # (N, W) or None
        return state, _StepInputs(rows, hidden[:, -1], state.dep.k[:, :, :width], state.dep.v[:, :, :width], key_mask)

    def _decode(self, state: _CachedRows, seqs: _Sequences, plan: StepPlan, cfg: GenerationConfig) -> _StepInputs:
        """Feed each cached row's newest token (column lmax + step - 1) through the caches."""
        model, rows = self.model, state.rows
        slot = state.width + plan.step - 1  # the new token's cache slot
        key_mask = state.key_mask(slot, cfg.max_context, rolling=plan.trim_window)  # (n, slot + 1) or None
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]  # (n, 1, 1, slot + 1)
        positions = (slot - state.pad)[:, None]  # (n, 1)
        end = seqs.lmax + plan.step
        col = slice(end - 1, end)
        hidden = self._decode_fn(cfg.compile)(
            model, seqs.s1[rows, col], seqs.s2[rows, col], seqs.stamps[rows, col], positions, attn_mask,
            state.caches, slot,
        )  # (n, 1, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, 1, D)
        state.dep.write(slot, k, v)
        s = slot + 1
        return _StepInputs(rows, hidden[:, 0], state.dep.k[:, :, :s], state.dep.v[:, :, :s], key_mask)

    def _recompute(self, rows: torch.Tensor, seqs: _Sequences, step: int, mc: int) -> _StepInputs:
        """Full forward over each row's window (positions restart at 0), no cache."""
        model = self.model
        end = seqs.lmax + step  # column after each row's newest token
        window = torch.clamp(seqs.lengths[rows] + step, max=mc)  # (n,)
        width = int(window.max())
        pad = width - window  # (n,)
        cols = slice(end - width, end)
        positions, mask = padded_positions_and_mask(pad, width)  # (n, W), (n, 1, W, W) or None
        x = model.embed(seqs.s1[rows, cols], seqs.s2[rows, cols], seqs.stamps[rows, cols])  # (n, W, d)
        hidden = model.trunk(x, positions, mask)  # (n, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, W, D)
        key_mask = None if mask is None else torch.arange(width, device=rows.device)[None, :] >= pad[:, None]
        return _StepInputs(rows, hidden[:, -1], k, v, key_mask)


__all__ = ["EngineStats", "GenerationConfig", "GenerationOutput", "Generator", "SLIDING_MODES"]
