"""The generation loop: tokenize once, prefill once, decode one token per step from caches.

One step (``_step``) is: run the trunk for the rows' newest token (from the
key/value cache) or, for rows whose window slides in exact mode, over their
whole window; sample s1 from the last hidden state; sample s2 from the s2 head,
whose keys/values over the window's hidden states are cached too. Modes:

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
from dataclasses import dataclass, field

import torch

from kronos_core.engine.batch import EngineBatch
from kronos_core.engine.sampling import SamplingParams, counter_uniforms, sample_tokens
from kronos_core.model.config import DEP_HEADS
from kronos_core.model.kronos import Kronos
from kronos_core.model.layers import KVCache, padded_positions_and_mask
from kronos_core.model.tokenizer import KronosTokenizer

SLIDING_MODES = ("exact", "rolling", "recompute")


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
        self.rows, self.pad, self.width = rows, pad, width  # pad (n,) within the cache layout
        self.caches = [KVCache(n, c.n_heads, capacity, c.head_dim, dtype, dev) for _ in range(c.n_layers)]
        self.dep = KVCache(n, DEP_HEADS, capacity, c.d_model // DEP_HEADS, dtype, dev)

    def keep(self, keep: torch.Tensor) -> None:
        """Drop rows: keep (n,) bool."""
        idx = keep.nonzero()[:, 0]
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


class Generator:
    """Runs ``generate`` for one model/tokenizer pair; keeps the compiled step between calls."""

    def __init__(self, model: Kronos, tokenizer: KronosTokenizer):
        if (model.config.s1_bits, model.config.s2_bits) != (tokenizer.config.s1_bits, tokenizer.config.s2_bits):
            raise ValueError(
                f"tokenizer bit widths (s1_bits={tokenizer.config.s1_bits}, s2_bits={tokenizer.config.s2_bits}) "
                f"do not match the model's (s1_bits={model.config.s1_bits}, s2_bits={model.config.s2_bits})"
            )
        self.model, self.tokenizer = model, tokenizer
        self._compiled = None

    def _decode_fn(self, compile: bool):
        if not compile:
            return decode_step_forward
        if self._compiled is None:
            self._compiled = torch.compile(decode_step_forward, dynamic=True)
        return self._compiled

    @torch.inference_mode()
    def generate(self, batch: EngineBatch, cfg: GenerationConfig) -> GenerationOutput:
        model, tok = self.model, self.tokenizer
        dev = batch.x.device
        n_rows, lmax, horizon, mc = batch.rows, batch.x.shape[1], cfg.horizon, cfg.max_context
        if batch.horizon != horizon:
            raise ValueError(f"batch has {batch.horizon} future stamps, config asks for horizon {horizon}")
        stats = EngineStats(rows=n_rows, horizon=horizon, tokens_generated=n_rows * horizon)
        lengths, pad = batch.lengths, batch.pad
        cache_dtype = cfg.autocast_dtype or torch.float32
        decode_fn = self._decode_fn(cfg.compile)

        with _autocast(dev, cfg.autocast_dtype):
            t0 = time.perf_counter()
            s1_hist, s2_hist = tok.encode(batch.x, pad if int(pad.max()) > 0 else None)  # (N, Lmax)
            stats.tokenize_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            seq_s1 = torch.cat([s1_hist, s1_hist.new_zeros(n_rows, horizon)], dim=1)  # (N, Lmax + H)
            seq_s2 = torch.cat([s2_hist, s2_hist.new_zeros(n_rows, horizon)], dim=1)
            stamps = torch.cat([batch.x_stamp, batch.y_stamp], dim=1)  # (N, Lmax + H, 5)
            all_rows = torch.arange(n_rows, device=dev)
            cached: _CachedRows | None = None
            steps = range(horizon)
            if cfg.progress:
                from tqdm.auto import tqdm

                steps = tqdm(steps, desc="generating", unit="step", leave=False)
            for step in steps:
                end = lmax + step  # column after each row's newest token
                n_tokens = lengths + step  # (N,) tokens each row has before this step
                groups: list[_StepInputs] = []
                if cfg.sliding == "recompute":
                    slide = torch.ones(n_rows, dtype=torch.bool, device=dev)
                elif cfg.sliding == "exact":
                    slide = n_tokens > mc
                else:
                    slide = torch.zeros(n_rows, dtype=torch.bool, device=dev)

                if cfg.sliding != "recompute":
                    if step == 0:
                        cached, first = self._prefill(seq_s1, seq_s2, stamps, lengths, lmax, mc, horizon, cache_dtype)
                        groups.append(first)
                    elif cached is not None:
                        leaving = slide[cached.rows]
                        if bool(leaving.any()):
                            cached.keep(~leaving)
                        if cached.rows.numel():
                            groups.append(self._decode(cached, seq_s1, seq_s2, stamps, step, end, cfg, decode_fn))
                        else:
                            cached = None
                if step > 0 or cfg.sliding == "recompute":
                    rows = all_rows[slide]
                    if rows.numel():
                        groups.append(self._recompute(rows, seq_s1, seq_s2, stamps, n_tokens, end, mc))
                        stats.recomputed_row_steps += rows.numel()

                hidden_last = torch.empty(n_rows, model.config.d_model, device=dev, dtype=groups[0].hidden_last.dtype)
                for g in groups:
                    hidden_last[g.rows] = g.hidden_last
                s1 = sample_tokens(model.s1_logits(hidden_last), cfg.sampling, self._uniforms(batch, step, 0))
                logits2 = None
                for g in groups:
                    part = model.s2_logits(g.hidden_last, s1[g.rows], g.dep_k, g.dep_v, g.key_mask)
                    if logits2 is None:
                        logits2 = part.new_empty(n_rows, part.shape[-1])
                    logits2[g.rows] = part
                s2 = sample_tokens(logits2, cfg.sampling, self._uniforms(batch, step, 1))
                seq_s1[:, end], seq_s2[:, end] = s1, s2
            stats.generate_seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            total = lmax + horizon
            window = torch.clamp(lengths + horizon, max=mc)  # (N,)
            width = int(window.max())
            dec_pad = width - window
            candles = tok.decode(
                seq_s1[:, total - width :], seq_s2[:, total - width :], dec_pad if int(dec_pad.max()) > 0 else None
            )[:, -horizon:].float()  # (N, H, 6)
            stats.detokenize_seconds = time.perf_counter() - t0
        return GenerationOutput(seq_s1[:, lmax:], seq_s2[:, lmax:], candles, stats)

    @staticmethod
    def _uniforms(batch: EngineBatch, step: int, kind: int) -> torch.Tensor | None:
        return None if batch.row_keys is None else counter_uniforms(batch.row_keys, step, kind)

    def _prefill(self, seq_s1, seq_s2, stamps, lengths, lmax, mc, horizon, cache_dtype):
        """Run every row's first window once, filling the caches. Returns (state, step-0 inputs)."""
        model = self.model
        window = torch.clamp(lengths, max=mc)  # (N,)
        width = int(window.max())
        pad = width - window  # (N,)
        cols = slice(lmax - width, lmax)
        rows = torch.arange(seq_s1.shape[0], device=seq_s1.device)
        state = _CachedRows(model, rows, pad, width, width + horizon, cache_dtype)
        positions, mask = padded_positions_and_mask(pad, width)
        x = model.embed(seq_s1[:, cols], seq_s2[:, cols], stamps[:, cols])  # (N, W, d)
        hidden = model.trunk(x, positions, mask, state.caches, 0)  # (N, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (N, 4, W, D)
        state.dep.write(0, k, v)
        key_mask = state.key_mask(width - 1, mc, rolling=False)
        return state, _StepInputs(rows, hidden[:, -1], state.dep.k[:, :, :width], state.dep.v[:, :, :width], key_mask)

    def _decode(self, state: _CachedRows, seq_s1, seq_s2, stamps, step, end, cfg, decode_fn) -> _StepInputs:
        """Feed each cached row's newest token (column end - 1) through the caches."""
        model, rows = self.model, state.rows
        slot = state.width + step - 1  # the new token's cache slot
        key_mask = state.key_mask(slot, cfg.max_context, rolling=cfg.sliding == "rolling")  # (n, slot + 1)
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]  # (n, 1, 1, slot + 1)
        positions = (slot - state.pad)[:, None]  # (n, 1)
        col = slice(end - 1, end)
        hidden = decode_fn(
            model, seq_s1[rows, col], seq_s2[rows, col], stamps[rows, col], positions, attn_mask, state.caches, slot
        )  # (n, 1, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, 1, D)
        state.dep.write(slot, k, v)
        s = slot + 1
        return _StepInputs(rows, hidden[:, 0], state.dep.k[:, :, :s], state.dep.v[:, :, :s], key_mask)

    def _recompute(self, rows, seq_s1, seq_s2, stamps, n_tokens, end, mc) -> _StepInputs:
        """Full forward over each row's window (positions restart at 0), no cache."""
        model = self.model
        window = torch.clamp(n_tokens[rows], max=mc)  # (n,)
        width = int(window.max())
        pad = width - window
        cols = slice(end - width, end)
        positions, mask = padded_positions_and_mask(pad, width)
        x = model.embed(seq_s1[rows, cols], seq_s2[rows, cols], stamps[rows, cols])  # (n, W, d)
        hidden = model.trunk(x, positions, mask)  # (n, W, d)
        k, v = model.dep_layer.cross_attn.project_kv(hidden)  # (n, 4, W, D)
        key_mask = None if mask is None else torch.arange(width, device=rows.device)[None, :] >= pad[:, None]
        return _StepInputs(rows, hidden[:, -1], k, v, key_mask)


def generate(model: Kronos, tokenizer: KronosTokenizer, batch: EngineBatch, cfg: GenerationConfig) -> GenerationOutput:
    """One-shot convenience wrapper around ``Generator``."""
    return Generator(model, tokenizer).generate(batch, cfg)


__all__ = ["EngineStats", "GenerationConfig", "GenerationOutput", "Generator", "SLIDING_MODES", "generate"]
