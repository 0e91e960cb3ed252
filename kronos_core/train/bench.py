"""``kronos train bench``: training throughput and peak memory, one technique at a time.

Each variant (fp32, bf16, checkpointing, accumulation x4) of the default
predictor config (or ``--config``) runs in a fresh subprocess so its peak
resident memory is its own. Reported per variant: samples/s over the timed steps
(the first step is warm-up), the peak RSS growth during training, and the
planner's estimate of the same quantity (optimiser state + activations +
temporaries; parameters and the frozen tokenizer exist before training starts)
with its error.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from kronos_core.train.config import load_config

VARIANTS: dict[str, dict] = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "checkpointing": {"grad_checkpointing": True},
    "accumulation x4": {"accum_steps": 4},
}
DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default-predictor.yaml"


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _planner_estimate(trainer) -> int | None:
    try:
        from kronos_core.plan.planner import plan_training
    except ImportError:
        return None
    plan = plan_training(
        trainer.model.config, trainer.tok.config, trainer.cfg.data.window - 1,
        trainer.micro_batch_size, trainer.cfg.precision, trainer.cfg.grad_checkpointing,
        trainer.accum, foreach_optimizer=False,
    )
    return plan.total - plan.parameters - plan.tokenizer


def measure(config: str | None, overrides: dict, steps: int) -> dict:
    """Run ``steps`` + 1 training steps in this process; returns the figures."""
    from kronos_core.train.data import make_loader
    from kronos_core.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(config, {"out": out, "eval_every": 10**6, "save_every": 10**6,
                                   "tensorboard": False, **overrides})
        trainer = Trainer(cfg)
        batches = iter(make_loader(trainer.train_set, trainer.sampler, 0))
        batch = next(batches)
        before = _rss_bytes()
        trainer.train_step(batch)  # warm-up: allocates optimiser state
        start = time.perf_counter()
        for _ in range(steps):
            trainer.train_step(next(batches))
        elapsed = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        estimate = _planner_estimate(trainer)
        growth = max(peak - before, 0)
        return {
            "samples_per_s": steps * trainer.batch_size / elapsed, "step_s": elapsed / steps,
            "batch": trainer.batch_size, "micro_batch": trainer.micro_batch_size,
            "accum": trainer.accum, "window": cfg.data.window, "peak_rss_mb": peak / 2**20,
            "train_growth_mb": growth / 2**20,
            "planner_mb": None if estimate is None else estimate / 2**20,
            "planner_error": None
            if estimate is None or not growth
            else (estimate - growth) / growth,
        }


def _in_process(config: str, overrides: dict, steps: int) -> dict:
    """``measure`` in a fresh subprocess (its own peak RSS, its own torch threads); raises
    ``RuntimeError`` with the tail of its stderr when it fails."""
    spec = json.dumps({"config": config, "overrides": overrides, "steps": steps})
    proc = subprocess.run([sys.executable, "-m", "kronos_core.train.bench", spec],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _base_overrides(args: argparse.Namespace) -> dict:
    from kronos_core.train.default import REAL_DATA

    base = {
        k: v
        for k, v in {
            "threads": args.threads, "device": args.device, "batch_size": args.batch_size,
        }.items()
        if v is not None
    }
    base["data.paths"] = args.data or [str(REAL_DATA)]  # the bundled real candles unless --data
    return base


def run_threads(args: argparse.Namespace) -> int:
    """``--compare-threads 1 2``: fp32 steps of the config at each thread count, every count in
    a fresh process, the counts alternating for ``--rounds`` rounds (so a load that comes and
    goes hits them alike); prints each round's seconds per step, the medians and their ratio to
    the first count's."""
    import statistics

    config = args.config or str(DEFAULT_CONFIG)
    base = _base_overrides(args)
    counts = list(args.compare_threads)
    step_s: dict[int, list[float]] = {t: [] for t in counts}
    for r in range(max(1, args.rounds)):
        for t in counts:
            try:
                res = _in_process(config, {**base, "threads": t}, args.steps)
            except RuntimeError as exc:
                print(f"threads {t}: failed\n{exc}", file=sys.stderr)
                return 1
            step_s[t].append(res["step_s"])
            print(f"round {r + 1}: threads {t}: {res['step_s']:.3f} s/step "
                  f"({res['samples_per_s']:.1f} samples/s, batch {res['batch']})", flush=True)
    medians = {t: statistics.median(v) for t, v in step_s.items()}
    first = medians[counts[0]]
    print(f"{'threads':>7} {'median s/step':>14} {'x threads ' + str(counts[0]):>14}")
    for t in counts:
        print(f"{t:>7} {medians[t]:>14.3f} {medians[t] / first:>14.2f}")
    print(json.dumps({"step_s": {str(t): v for t, v in step_s.items()},
                      "median_step_s": {str(t): v for t, v in medians.items()}}))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """Every variant in its own process; prints a table and the JSON (``--compare-threads``:
    ``run_threads`` instead)."""
    if getattr(args, "compare_threads", None):
        return run_threads(args)
    config = args.config or str(DEFAULT_CONFIG)
    base = _base_overrides(args)
    results = {}
    for name, extra in tqdm(VARIANTS.items(), desc="train bench", total=len(VARIANTS)):
        try:
            results[name] = _in_process(config, {**base, **extra}, args.steps)
        except RuntimeError as exc:
            print(f"{name}: failed\n{exc}", file=sys.stderr)
            return 1
    print(
        f"{'variant':<16} {'samples/s':>10} {'step s':>8} {'micro x acc':>11} {'peak RSS MB':>12} "
        f"{'train +MB':>10} {'planner MB':>11} {'error':>7}"
    )
    for name, r in results.items():
        planner = "-" if r["planner_mb"] is None else f"{r['planner_mb']:.0f}"
        error = "-" if r["planner_error"] is None else f"{r['planner_error']:+.0%}"
        print(
            f"{name:<16} {r['samples_per_s']:>10.1f} {r['step_s']:>8.2f} "
            f"{r['micro_batch']:>5} x {r['accum']:<3} {r['peak_rss_mb']:>12.0f} "
            f"{r['train_growth_mb']:>10.0f} {planner:>11} {error:>7}"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":  # one variant, in a fresh process (see run_bench)
    spec = json.loads(sys.argv[1])
    print(json.dumps(measure(spec["config"], spec["overrides"], spec["steps"])))
