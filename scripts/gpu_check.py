"""The engine figures of ``scripts/gpu-check.sh``, written as JSON files into one folder.

Needs only torch, numpy, pandas, pyarrow and safetensors (what a bare GPU machine has):
it imports the engine, the model and the predictor, never ``service`` (pydantic, Ray)
nor the resource monitor (psutil). Files written:

* ``engine.json``: the cached engine against full recompute (tokens/s, series·steps/s,
  ratio, identical), exact against rolling once the window slides, and on CUDA the
  large workload in float32 and bfloat16;
* ``syncs.json``: host-device synchronising ops of every decode step
  (``kronos_core.engine.syncs.HostSyncCounter``), per workload, and the steady-state maximum;
* ``steps.json``: decode-step latency, eager and with ``cuda_graphs`` (CUDA only;
  on a CPU the flag is ignored and that entry says so), and whether both agree;
* ``interleave.json``: two jobs stepped in turn against one after the other (time, identical);
* ``summary.json``: the headline figures, device, torch version, wall time.

``--tiny`` uses the reference fixture (tests/fixtures/kronos-tiny) and small
workloads (seconds on a CPU); without it, Kronos-small dimensions with random weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kronos_core.base.options import ForecastOptions  # noqa: E402
from kronos_core.cli.bench import SMALL, random_small, synthetic_series  # noqa: E402
from kronos_core.engine.syncs import HostSyncCounter, syncs_per_step  # noqa: E402
from kronos_core.model import Kronos, KronosTokenizer  # noqa: E402
from kronos_core.predictor import KronosPredictor  # noqa: E402

TINY = REPO / "tests" / "fixtures" / "kronos-tiny"


def _greedy(horizon: int, **changes: Any) -> ForecastOptions:
    """Greedy decoding (top_k=1), as ``kronos bench`` measures."""
    return ForecastOptions(horizon, top_k=1, top_p=1.0, **changes)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _models(tiny: bool, seed: int) -> tuple[Kronos, KronosTokenizer]:
    if tiny:
        return Kronos.from_pretrained(TINY / "model").eval(), KronosTokenizer.from_pretrained(
            TINY / "tokenizer"
        ).eval()
    return random_small(seed)


def _workloads(tiny: bool) -> dict[str, Any]:
    """(series, lookback, horizon) of each workload; context of the sliding one."""
    if tiny:
        return {
            "fits": (4, 48, 8), "slides": (4, 64, 8), "slide_context": 64, "large": (16, 48, 16),
            "steps": (8, 48, 12),
        }
    return {
        "fits": (8, 400, 24), "slides": (8, 512, 24), "slide_context": 512,
        "large": (1000, 400, 120), "steps": (64, 400, 48),
    }


Data = tuple[list[np.ndarray], list[Any], list[Any]]  # values, history stamps, future stamps


def _data(n: int, lookback: int, horizon: int, seed: int) -> Data:
    values, xs, ys = synthetic_series(n, lookback, horizon, seed)
    return values, xs, [y[:horizon] for y in ys]


def _timed(predictor: KronosPredictor, data: Data, options: ForecastOptions) -> tuple[Any, dict]:
    device = predictor.device
    _sync(device)
    t0 = time.perf_counter()
    res = predictor.forecast(data[0], data[1], data[2], options)
    _sync(device)
    seconds = time.perf_counter() - t0
    n, h = len(data[0]), options.horizon
    rows = n * options.sample_count
    return res, {
        "series": n, "horizon": h, "rows": rows, "seconds": seconds,
        "tokens_per_s": rows * h / seconds, "series_steps_per_s": n * h / seconds,
        "tokenize_s": res.stats.tokenize_seconds, "generate_s": res.stats.generate_seconds,
        "detokenize_s": res.stats.detokenize_seconds,
    }


def engine_figures(model, tok, device, tiny: bool, seed: int) -> dict:
    w = _workloads(tiny)
    out: dict[str, Any] = {}
    predictor = KronosPredictor(model, tok, device=device, max_context=512)
    n, lb, h = w["fits"]
    data = _data(n, lb, h, seed)
    predictor.forecast(data[0], data[1], [y[:2] for y in data[2]], _greedy(2))  # warm-up
    slow, a = _timed(predictor, data, _greedy(h, sliding="recompute"))
    fast, b = _timed(predictor, data, _greedy(h, sliding="exact"))
    out["fits_context"] = {"recompute": a, "cached": b, "ratio": a["seconds"] / b["seconds"],
                           "identical": bool(np.array_equal(slow.paths, fast.paths))}
    n, lb, h = w["slides"]
    sliding = KronosPredictor(model, tok, device=device, max_context=w["slide_context"])
    data = _data(n, lb, h, seed + 1)
    exact, e = _timed(sliding, data, _greedy(h, sliding="exact"))
    rolling, r = _timed(sliding, data, _greedy(h, sliding="rolling"))
    dev = np.abs(rolling.mean[..., 3] - exact.mean[..., 3]) / np.abs(exact.mean[..., 3])
    out["sliding"] = {"exact": e, "rolling": r, "speedup": e["seconds"] / r["seconds"],
                      "close_rel_dev_mean": float(dev.mean())}
    if device.type == "cuda" or tiny:
        n, lb, h = w["large"]
        data = _data(n, lb, h, seed + 3)
        large = {}
        for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
            if dtype is not None and device.type == "cpu":
                continue  # autocast bf16 on a CPU measures nothing useful
            p = KronosPredictor(model, tok, device=device, max_context=512, dtype=dtype)
            p.forecast(data[0][:8], data[1][:8], data[2][:8], _greedy(h))  # warm-up
            large[name] = _timed(p, data, _greedy(h))[1]
        out["large"] = large
    return out


def sync_figures(model, tok, device, tiny: bool) -> dict:
    """Synchronising ops of each step of a few workloads; steady = decode steps that evict
    nothing."""
    horizon = 8 if tiny else 16
    cases = {
        "greedy": (_greedy(horizon), "exact", 512, [48, 40, 30]),
        "seeded": (
            ForecastOptions(horizon, sample_count=2, top_p=0.9, seed=7), "exact", 512, [48, 40, 30],
        ),
        "rolling_slides": (ForecastOptions(horizon, seed=3), "rolling", 50, [48, 40]),
        "exact_slides": (ForecastOptions(horizon, seed=3), "exact", 50, [46, 30]),
    }
    out: dict[str, Any] = {"cases": {}}
    steady_max = 0
    counter = HostSyncCounter()
    for name, (options, mode, mc, lookbacks) in cases.items():
        predictor = KronosPredictor(model, tok, device=device, max_context=mc, sliding=mode)
        values, xs, ys = [], [], []
        for i, lb in enumerate(lookbacks):
            v, x, y = _data(1, lb, horizon, i)
            values += v
            xs += x
            ys += y
        job = predictor.start_forecast(values, xs, ys, options)
        steps = job.generation.cache_steps
        counts = syncs_per_step(job, counter)
        steady = [counts[s] for s in range(1, horizon - 1) if not steps[s].evict]
        steady_max = max(steady_max, max(steady))
        out["cases"][name] = {
            "per_step": counts, "steady_steps": len(steady), "steady_max": max(steady),
        }
    out["steady_max"] = steady_max
    return out


def _step_times(
    predictor: KronosPredictor, data: Data, options: ForecastOptions
) -> tuple[np.ndarray, list[float]]:
    job = predictor.start_forecast(data[0], data[1], data[2], options)
    times = []
    while not job.done:
        _sync(predictor.device)
        t0 = time.perf_counter()
        job.step()
        _sync(predictor.device)
        times.append(time.perf_counter() - t0)
    # steady decode steps: not the prefill, not the detokenize
    return job.result().paths, times[1:-1]


def step_figures(model, tok, device, tiny: bool, seed: int) -> dict:
    n, lb, h = _workloads(tiny)["steps"]
    data = _data(n, lb, h, seed + 5)
    options = _greedy(h)
    out: dict[str, Any] = {"series": n, "lookback": lb, "horizon": h}
    eager = KronosPredictor(model, tok, device=device, max_context=512)
    _step_times(eager, data, options)  # warm-up
    paths, times = _step_times(eager, data, options)
    out["eager"] = {"median_ms": 1e3 * statistics.median(times), "max_ms": 1e3 * max(times)}
    if device.type != "cuda":
        out["cuda_graphs"] = {
            "skipped": f"device {device}: cuda_graphs is ignored off CUDA (logged)"
        }
        return out
    graphs = KronosPredictor(model, tok, device=device, max_context=512, cuda_graphs=True)
    t0 = time.perf_counter()
    _step_times(graphs, data, options)  # compile + capture
    warm = time.perf_counter() - t0
    g_paths, g_times = _step_times(graphs, data, options)
    out["cuda_graphs"] = {
        "median_ms": 1e3 * statistics.median(g_times), "max_ms": 1e3 * max(g_times),
        "first_run_s": warm, "identical_to_eager": bool(np.array_equal(paths, g_paths)),
        "max_abs_diff": float(np.max(np.abs(paths - g_paths))),
    }
    out["speedup"] = out["eager"]["median_ms"] / out["cuda_graphs"]["median_ms"]
    return out


def interleave_figures(model, tok, device, tiny: bool, seed: int) -> dict:
    """Two forecasts stepped in turn on one device against one after the other."""
    n, lb, h = _workloads(tiny)["fits"]
    big, small = _data(n, lb, h, seed + 7), _data(max(1, n // 4), lb // 2, h, seed + 8)
    options = ForecastOptions(h, sample_count=2, seed=11)
    predictor = KronosPredictor(model, tok, device=device, max_context=512)
    _sync(device)
    t0 = time.perf_counter()
    alone = [predictor.forecast(d[0], d[1], d[2], options) for d in (big, small)]
    _sync(device)
    sequential = time.perf_counter() - t0
    jobs = [predictor.start_forecast(d[0], d[1], d[2], options) for d in (big, small)]
    t0 = time.perf_counter()
    while not all(j.done for j in jobs):
        for j in jobs:
            if not j.done:
                j.step()
    results = [j.result() for j in jobs]
    _sync(device)
    interleaved = time.perf_counter() - t0
    return {"sequential_s": sequential, "interleaved_s": interleaved,
            "identical": all(np.array_equal(a.paths, b.paths) for a, b in zip(alone, results))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("out", type=Path, help="folder for the JSON files")
    parser.add_argument(
        "--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N"
    )
    parser.add_argument(
        "--tiny", action="store_true",
        help="the reference fixture and small workloads (CPU dry run)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    device = _device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    model, tok = _models(args.tiny, args.seed)
    env = {
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "tiny": args.tiny,
        "model": "kronos-tiny fixture" if args.tiny else f"random, Kronos-small dims {SMALL}",
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    figures = {
        "engine": engine_figures(model, tok, device, args.tiny, args.seed),
        "syncs": sync_figures(model, tok, device, args.tiny),
        "steps": step_figures(model, tok, device, args.tiny, args.seed),
        "interleave": interleave_figures(model, tok, device, args.tiny, args.seed),
    }
    for name, body in figures.items():
        (args.out / f"{name}.json").write_text(json.dumps({**env, **body}, indent=2, default=str))
    cached = figures["engine"]["fits_context"]["cached"]
    summary = {
        **env,
        "tokens_per_s": cached["tokens_per_s"],
        "series_steps_per_s": cached["series_steps_per_s"],
        "cached_vs_recompute": figures["engine"]["fits_context"]["ratio"],
        "cached_identical_to_recompute": figures["engine"]["fits_context"]["identical"],
        "host_syncs_per_steady_step": figures["syncs"]["steady_max"],
        "decode_step_ms": figures["steps"]["eager"]["median_ms"],
        "decode_step_ms_cuda_graphs": figures["steps"]["cuda_graphs"].get("median_ms"),
        "interleaved_identical": figures["interleave"]["identical"],
        "wall_s": time.perf_counter() - t_start,
        "files": sorted(f"{name}.json" for name in figures) + ["summary.json"],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
