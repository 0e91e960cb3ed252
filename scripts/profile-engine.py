"""Where one big forecast's time goes in the engine, per part (issue 53).

Runs the bundled default model in-process on the sample store's first ``--symbols`` symbols
(lookback ``--lookback``, horizon ``--horizon``, the model's own sample paths), in engine calls
of ``--series-per-call`` series (default 8: 256 rows at 32 paths, about what one service replica
batch holds: ``max_prefill_tokens`` 2,048 history tokens), and times each part with wall-clock
timers around the engine's functions (a CPU runs ops synchronously, so a timer around a call
is that call's cost). Parts nest: "decode: trunk" holds "decode: attention" and "decode: MLP".
"Python overhead" is what the torch profiler, run over one call, does not see inside ops:
wall time minus the ops' own CPU time.

    .venv/bin/python scripts/profile-engine.py --symbols 256 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

import kronos_core.engine.job as job_module
import kronos_core.engine.sampling as sampling_module
from kronos_core.base.options import ForecastOptions
from kronos_core.data.portfolio_windows import sample_store_windows
from kronos_core.loading import PredictorConfig, load_predictor
from kronos_core.model.kronos import Kronos
from kronos_core.model.layers import SelfAttention, SwiGLU
from kronos_core.model.tokenizer import KronosTokenizer


class PartTimer:
    """Inclusive wall seconds and calls per label; ``phase`` prefixes the labels of shared
    functions (the trunk runs in the prefill and in every decode step)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self.phase = "other"

    def wrap(self, fn: Callable, label: str, phase: str | None = None, shared: bool = False):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            saved = self.phase
            if phase is not None:
                self.phase = phase
            name = f"{self.phase}: {label}" if shared else label
            t0 = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += self.clock() - t0
                self.calls[name] += 1
                self.phase = saved

        return timed


def instrument(timer: PartTimer, predictor) -> None:
    """Wrap the engine's parts (class attributes, so every instance and call site sees them)."""
    tok_cls, gen_cls = KronosTokenizer, job_module.Generation
    tok_cls.encode = timer.wrap(tok_cls.encode, "tokenizer encode", "tokenize")
    gen_cls._prefill = timer.wrap(gen_cls._prefill, "prefill", "prefill")
    gen_cls._detokenize = timer.wrap(gen_cls._detokenize, "token-to-candle decode", "detokenize")
    gen_cls._sample = timer.wrap(gen_cls._sample, "sampling + heads (all)", "sample")
    step = timer.wrap(job_module.decode_step, "decode step (trunk + s2 keys)", "decode")
    predictor.generator.decode_fn = lambda cfg, device: step
    SelfAttention.forward = timer.wrap(SelfAttention.forward, "attention (qkv, rotary, sdpa, out)",
                                       shared=True)
    SwiGLU.forward = timer.wrap(SwiGLU.forward, "MLP (SwiGLU)", shared=True)
    Kronos.embed = timer.wrap(Kronos.embed, "embedding", shared=True)
    Kronos.s1_logits = timer.wrap(Kronos.s1_logits, "s1 head (d -> 1,024)", shared=True)
    Kronos.s2_logits_of_groups = timer.wrap(
        Kronos.s2_logits_of_groups, "dependency layer + s2 head (d -> 1,024)", shared=True
    )
    job_module.sample_tokens = timer.wrap(
        sampling_module.sample_tokens, "sample_tokens (temperature, top-p, draw)", shared=True
    )
    sampling_module.filter_logits = timer.wrap(
        sampling_module.filter_logits, "filter_logits (temperature, top-p)", shared=True
    )


def run_calls(predictor, windows, horizon: int, per_call: int, seed: int,
              clock: Callable[[], float] = time.perf_counter) -> float:
    options = model_options(predictor, horizon, seed)
    t0 = clock()
    for start in range(0, len(windows), per_call):
        part = windows.chunk(start, start + per_call)
        predictor.forecast(part.values, part.x_stamps, part.y_stamps, options)
    return clock() - t0


def model_options(predictor, horizon: int, seed: int) -> ForecastOptions:
    """A seeded forecast at the model's own sampling defaults (its paths, temperature, top-p)."""
    return ForecastOptions(
        horizon, sample_count=predictor.sampling.sample_count, seed=seed
    ).with_defaults(predictor.sampling)


def op_share(predictor, windows, horizon: int, per_call: int, seed: int) -> dict:
    """One engine call under the torch profiler: wall time against the ops' own CPU time."""
    part = windows.chunk(0, per_call)
    options = model_options(predictor, horizon, seed)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        predictor.forecast(part.values, part.x_stamps, part.y_stamps, options)
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    op_self = sum(e.self_cpu_time_total for e in events) / 1e6
    ops = sum(e.count for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {
        "wall_s": wall, "ops_self_s": op_self, "ops": ops,
        "top_ops": [(e.key, e.count, e.self_cpu_time_total / 1e6) for e in top],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--symbols", type=int, default=256)
    ap.add_argument("--lookback", type=int, default=251)
    ap.add_argument("--horizon", type=int, default=5)
    ap.add_argument("--series-per-call", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="cpu: this process's CPU time (with --threads 1, what other processes on a loaded "
        "machine do not inflate)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    predictor = load_predictor(PredictorConfig())
    paths = predictor.sampling.sample_count
    windows = sample_store_windows(args.symbols, args.lookback, args.horizon)
    warm = windows.chunk(0, args.series_per_call)
    run_calls(predictor, warm, args.horizon, args.series_per_call, args.seed)  # oneDNN warm-up
    profiled = op_share(predictor, windows, args.horizon, args.series_per_call, args.seed)
    plain = run_calls(predictor, windows, args.horizon, args.series_per_call, args.seed, clock)
    timer = PartTimer(clock)
    instrument(timer, predictor)
    timed = run_calls(predictor, windows, args.horizon, args.series_per_call, args.seed, clock)
    row_steps = len(windows) * paths * args.horizon
    print(f"{len(windows)} symbols x {paths} paths, lookback {args.lookback}, horizon "
          f"{args.horizon}, {args.series_per_call} series a call, "
          f"{torch.get_num_threads()} threads, {args.clock} clock")
    print(f"forecast ({args.clock}): {plain:.2f} s plain, {timed:.2f} s instrumented "
          f"({plain / len(windows) * 1e3:.1f} ms a symbol, {plain / row_steps * 1e6:.0f} us a "
          "row-step)")
    print(f"{'part':<60} {'s':>8} {'share':>6} {'calls':>7}")
    rows = []
    for name, sec in sorted(timer.seconds.items(), key=lambda kv: -kv[1]):
        calls = timer.calls[name]
        rows.append({"part": name, "seconds": sec, "share": sec / timed, "calls": calls})
        print(f"{name:<60} {sec:8.3f} {sec / timed:6.1%} {timer.calls[name]:7d}")
    overhead = profiled["wall_s"] - profiled["ops_self_s"]
    print(f"one call under torch.profiler: wall {profiled['wall_s']:.3f} s, ops' own CPU time "
          f"{profiled['ops_self_s']:.3f} s in {profiled['ops']} ops; Python and dispatch outside "
          f"ops {overhead:.3f} s ({overhead / profiled['wall_s']:.0%})")
    for key, count, sec in profiled["top_ops"]:
        print(f"  {key:<40} {count:7d} {sec:8.4f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "symbols": len(windows), "paths": paths, "lookback": args.lookback,
            "horizon": args.horizon, "series_per_call": args.series_per_call,
            "threads": torch.get_num_threads(), "clock": args.clock, "plain_s": plain,
            "instrumented_s": timed,
            "parts": rows, "profiler": profiled,
        }, indent=2))


if __name__ == "__main__":
    main()
