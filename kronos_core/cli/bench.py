"""``kronos bench``: the cached engine against full recompute (the reference's algorithm).

Workloads (Kronos-small dimensions, random weights, greedy decoding):

1. 8 series, lookback 400, horizon 24 (fits the context): full recompute vs the
   cached engine; ratio a/b and a check that both forecasts are identical.
2. lookback 512, horizon 24 (the window slides every step): exact vs rolling
   cache, with the rolling mode's deviation from exact.
3. Memory: the memory model's estimate against the measured peak of live tensors.
4. On a GPU (``--gpu``): 1,000 series, lookback 400, horizon 120.

Every run also writes a ``ResourceMonitor`` report (CPU %, RSS, GPU use and
memory, series/s; ``--monitor-out``, default next to ``--json`` or
``bench-monitor.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from kronos_core.base.options import ForecastOptions
from kronos_core.engine.memory import LiveTensorMeter, memory_breakdown
from kronos_core.loading import PredictorConfig, build_predictor
from kronos_core.model import Kronos, KronosConfig, KronosTokenizer, TokenizerConfig
from kronos_core.predictor import KronosPredictor

# psutil is imported only when the command runs (scripts/gpu-check.sh reuses this module)
if TYPE_CHECKING:
    from kronos_core.base.monitor import ResourceMonitor

SMALL = KronosConfig(s1_bits=10, s2_bits=10, n_layers=8, d_model=512, n_heads=8, ff_dim=1024)
TOKENIZER_BASE = TokenizerConfig(
    d_in=6, d_model=256, n_heads=4, ff_dim=512, n_enc_layers=4, n_dec_layers=4, s1_bits=10,
    s2_bits=10,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--series", type=int, default=8, help="series in workload 1 (default 8)")
    parser.add_argument("--lookback", type=int, default=400)
    parser.add_argument("--horizon", type=int, default=24)
    parser.add_argument(
        "--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N"
    )
    parser.add_argument("--skip-sliding", action="store_true", help="skip workload 2")
    parser.add_argument("--skip-memory", action="store_true", help="skip workload 3")
    parser.add_argument(
        "--gpu", action="store_true", help="run workload 4 (1,000 series, horizon 120)"
    )
    parser.add_argument(
        "--cuda-graphs", action="store_true",
        help="CUDA graphs for the decode step (torch.compile reduce-overhead; ignored on a CPU)",
    )
    parser.add_argument("--gpu-series", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--monitor-out", type=Path, default=None,
        help="resource report (JSON) of the run; default: <--json stem>.monitor.json, "
        "else bench-monitor.json",
    )
    parser.add_argument(
        "--monitor-interval", type=float, default=0.5, help="seconds between samples"
    )


def monitor_path(args) -> Path:
    if args.monitor_out is not None:
        return args.monitor_out
    if args.json is not None:
        return args.json.with_name(args.json.stem + ".monitor.json")
    return Path("bench-monitor.json")


def random_small(seed: int) -> tuple[Kronos, KronosTokenizer]:
    torch.manual_seed(seed)
    return Kronos(SMALL).eval(), KronosTokenizer(TOKENIZER_BASE).eval()


def synthetic_series(
    n: int, length: int, horizon: int, seed: int
) -> tuple[list[np.ndarray], list[pd.DatetimeIndex], list[pd.DatetimeIndex]]:
    """Random-walk 5-minute candles: (values list, history stamps list, future stamps list)."""
    rng = np.random.default_rng(seed)
    stamps = pd.date_range("2024-01-02 09:35", periods=length + horizon, freq="5min")
    values, xs, ys = [], [], []
    for _ in range(n):
        close = 20 * np.exp(np.cumsum(rng.standard_t(4, length) * 0.002))
        open_ = np.concatenate([[close[0]], close[:-1]])
        spread = np.abs(rng.normal(0, 0.002, length)) * close
        high, low = np.maximum(open_, close) + spread, np.minimum(open_, close) - spread
        volume = rng.lognormal(8, 0.5, length)
        values.append(
            np.stack([open_, high, low, close, volume, volume * close], axis=1).astype(np.float32)
        )
        xs.append(stamps[:length])
        ys.append(stamps[length:])
    return values, xs, ys


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _run_forecast(predictor: KronosPredictor, data, horizon: int, sliding: str):
    values, xs, ys = data
    options = ForecastOptions(horizon, top_k=1, top_p=1.0, sliding=sliding)
    return predictor.forecast(values, xs, [y[:horizon] for y in ys], options)


def timed_forecast(
    predictor: KronosPredictor, data, horizon: int, sliding: str, memory_horizon: int | None = None
):
    """Time one forecast (no instrumentation), then measure its peak memory in a separate run.

    On CPU the peak comes from ``LiveTensorMeter`` (which slows execution, hence the
    separate run); ``memory_horizon`` shortens that run for the slow baseline. On a
    GPU the timed run's ``torch.cuda.max_memory_allocated`` is used.
    """
    device = predictor.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    _sync(device)
    t0 = time.perf_counter()
    res = _run_forecast(predictor, data, horizon, sliding)
    _sync(device)
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        meter = LiveTensorMeter()
        with meter:
            _run_forecast(predictor, data, memory_horizon or horizon, sliding)
        peak = meter.peak
    n = len(data[0])
    return res, {
        "seconds": seconds,
        "series_per_s": n / seconds,
        "tokens_per_s": n * horizon / seconds,
        "peak_bytes": peak,
        "tokenize_s": res.stats.tokenize_seconds,
        "generate_s": res.stats.generate_seconds,
        "detokenize_s": res.stats.detokenize_seconds,
    }


def steady_host_syncs(predictor: KronosPredictor, data, horizon: int = 6) -> int:
    """The most host-device syncs of any steady decode step (not the first, not the last) of a short
    run."""
    from kronos_core.engine.syncs import syncs_per_step

    values, xs, ys = data
    horizon = max(3, min(horizon, min(len(y) for y in ys)))
    job = predictor.start_forecast(
        values, xs, [y[:horizon] for y in ys], ForecastOptions(horizon, top_k=1)
    )
    return max(syncs_per_step(job)[1:-1])


def _fmt(name: str, r: dict) -> str:
    peak = "-" if r.get("peak_bytes") is None else f"{r['peak_bytes'] / 2**20:8.1f} MiB"
    return (
        f"  {name:<28} {r['seconds']:8.3f} s  {r['series_per_s']:9.2f} series/s  "
        f"{r['tokens_per_s']:10.1f} tok/s  peak {peak}"
    )


def run(args) -> int:
    from kronos_core.base.monitor import ResourceMonitor

    with ResourceMonitor(interval=args.monitor_interval, label="kronos bench") as monitor:
        code = _run(args, monitor)
    path = monitor_path(args)
    report = monitor.report(path)
    s = report["summary"]
    print(f"resource report written to {path} (peak RSS {s['rss_bytes_peak'] / 2**20:.0f} MiB, "
          f"mean CPU {s['cpu_percent_mean'] or 0:.0f}%)")
    for warning in report["warnings"]:
        print(f"  warning: {warning}")
    return code


def _run(args, monitor: ResourceMonitor) -> int:
    cfg = PredictorConfig(device=args.device, cuda_graphs=bool(getattr(args, "cuda_graphs", False)))
    device = cfg.torch_device()
    model, tok = random_small(args.seed)
    out: dict = {
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
    }
    print(
        f"kronos bench on {device} (torch {torch.__version__}, {torch.get_num_threads()} threads); "
        "Kronos-small dims, random weights, greedy"
    )

    # 1. full recompute vs cached engine
    predictor = build_predictor(model, tok, cfg)
    data = synthetic_series(args.series, args.lookback, args.horizon, args.seed)
    # Warm-up on the same batch shape (oneDNN builds kernels per shape on first use).
    predictor.forecast(data[0], data[1], [y[:2] for y in data[2]], ForecastOptions(2, top_k=1))
    print(f"\n[1] {args.series} series, lookback {args.lookback}, horizon {args.horizon}")
    res_a, a = timed_forecast(predictor, data, args.horizon, "recompute", memory_horizon=2)
    monitor.step(n_samples=args.series)
    print(_fmt("(a) full recompute", a) + "  (peak of a 2-step run)")
    res_b, b = timed_forecast(predictor, data, args.horizon, "exact")
    monitor.step(n_samples=args.series)
    print(_fmt("(b) cached engine", b))
    identical = bool(np.array_equal(res_a.paths, res_b.paths))
    max_rel = float(np.max(np.abs(res_a.paths - res_b.paths) / (np.abs(res_a.paths) + 1e-9)))
    ratio = a["seconds"] / b["seconds"]
    print(
        f"  ratio a/b = {ratio:.1f}x (goal >= 15)   forecasts identical: {identical} (max rel diff "
        f"{max_rel:.2e})"
    )
    out["fits_context"] = {
        "recompute": a, "cached": b, "ratio": ratio, "identical": identical,
        "max_rel_diff": max_rel,
    }
    syncs = steady_host_syncs(predictor, data)
    print(f"  host syncs per steady decode step: {syncs} (goal 0)")
    out["fits_context"]["host_syncs_per_steady_step"] = syncs

    # 2. sliding window: exact vs rolling cache
    if not args.skip_sliding:
        lb = 512
        data2 = synthetic_series(args.series, lb, args.horizon, args.seed + 1)
        print(
            f"\n[2] {args.series} series, lookback {lb}, horizon {args.horizon} (window slides "
            "every step)"
        )
        res_e, e = timed_forecast(predictor, data2, args.horizon, "exact", memory_horizon=2)
        print(_fmt("exact (recompute on slide)", e))
        res_r, r = timed_forecast(predictor, data2, args.horizon, "rolling")
        monitor.step(n_samples=2 * args.series)
        print(_fmt("rolling cache", r))
        dev_close = np.abs(res_r.mean[..., 3] - res_e.mean[..., 3]) / np.abs(res_e.mean[..., 3])
        scale = np.std(np.concatenate([v[:, 3] for v in data2[0]]))
        dev_sd = np.abs(res_r.mean[..., 3] - res_e.mean[..., 3]) / scale
        same_first = float(np.mean(np.all(np.isclose(res_r.mean[:, 0], res_e.mean[:, 0]), axis=-1)))
        print(
            f"  rolling speed-up {e['seconds'] / r['seconds']:.1f}x; deviation of close vs exact: "
            f"mean {dev_close.mean():.2e} rel ({dev_sd.mean():.3f} history std), max "
            f"{dev_close.max():.2e} rel; first step identical for {same_first:.0%} of series"
        )
        out["sliding"] = {
            "exact": e, "rolling": r, "speedup": e["seconds"] / r["seconds"],
            "close_rel_dev_mean": float(dev_close.mean()),
            "close_rel_dev_max": float(dev_close.max()),
            "close_dev_in_std_mean": float(dev_sd.mean()),
        }

    # 3. memory model vs measured
    if not args.skip_memory and device.type == "cpu":
        print("\n[3] memory model vs measured peak of live tensors (weights excluded)")
        rows = []
        for n, lb, h, s in [(8, 400, 24, 1), (4, 256, 32, 4), (16, 128, 16, 1)]:
            d = synthetic_series(n, lb, h, args.seed + 2)
            meter = LiveTensorMeter()
            with meter:
                predictor.forecast(d[0], d[1], d[2], ForecastOptions(h, sample_count=s, seed=1))
            est = memory_breakdown(
                SMALL, TOKENIZER_BASE, n, lb, h, s, include_weights=False, ragged=False
            ).total
            err = est / meter.peak - 1
            rows.append(
                {
                    "series": n, "lookback": lb, "horizon": h, "samples": s, "measured": meter.peak,
                    "estimate": est, "error": err,
                }
            )
            print(
                f"  series {n:3d} lookback {lb} horizon {h} samples {s}: measured "
                f"{meter.peak / 2**20:7.1f} MiB, estimate {est / 2**20:7.1f} MiB ({err:+.0%})"
            )
        out["memory"] = rows

    # 4. GPU workload
    if args.gpu:
        out["gpu"] = gpu_workload(model, tok, device, args)
        monitor.step(n_samples=2 * args.gpu_series)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2, default=str))
        print(f"\nfigures written to {args.json}")
    return 0


def gpu_workload(model, tok, device, args) -> dict:
    n, lb, h = args.gpu_series, 400, 120
    data = synthetic_series(n, lb, h, args.seed + 3)
    results = {}
    print(f"\n[4] {n} series, lookback {lb}, horizon {h} on {device}")
    for name in ("float32", "bfloat16"):
        pred = build_predictor(model, tok, PredictorConfig(device=str(device), dtype=name))
        # warm-up (and compile, where asked)
        pred.forecast(data[0][:8], data[1][:8], data[2][:8], ForecastOptions(h, top_k=1))
        _, r = timed_forecast(pred, data, h, "exact")
        est = memory_breakdown(SMALL, TOKENIZER_BASE, n, lb, h, 1, pred.dtype or torch.float32,
                               ragged=False).total
        r["memory_estimate_bytes"] = est
        print(_fmt(name, r) + f"  (model estimate {est / 2**20:.0f} MiB incl. weights)")
        results[name] = r
    return results
