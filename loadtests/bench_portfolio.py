"""``kronos bench portfolio``: a portfolio forecast at the model's own defaults against what this
machine's matrix speed allows (issue 53).

    kronos bench portfolio --symbols 1000 --horizon 5            # the engine, in-process
    flock /tmp/kronos-ray.lock kronos bench portfolio --service  # + the same request via Ray Serve

Prints, in one run:

* the engine's in-process time for the windows (the bundled model, the sample store's first
  ``--symbols`` symbols, lookback ``max_context - horizon``, the model's own sample paths,
  temperature and top-p, seeded), in engine calls of ``--series-per-call`` series;
* the machine's matrix speed at the model's shapes, measured here with the engine's threads:
  the trunk's (rows x d) @ (d x d), its fused q/k/v and MLP products, the heads' (rows x d) @
  (d x 1,024) and the tokenizer's (rows x 64) @ (64 x 64), at the rows of one call's prefill
  and of one decode step; the limit's rate is their median;
* the request's arithmetic (``kronos_core.plan.portfolio.forecast_flops``: the roofline's
  counting, ``kronos_core.plan.roofline``, over the real lengths, what the paths of a series
  share counted once) and the limit, FLOPs / rate;
* the ratio engine / limit (goal <= 2.5), and with ``--service`` the request's time through the
  service (``POST /v1/forecast``, the model's defaults: no ``sample_count`` sent) and the ratio
  service / engine (goal <= 1.2).

Each side is timed ``--passes`` times (default 3) over the same windows, and its figure is the
fastest pass, as the matrix speed is the best of its loops: on a shared host other work only ever
adds time, so the fastest pass is the closest to the machine's own speed. Every pass and the
median are printed and kept in the JSON (``--passes 1`` times one pass, as before).

Exits 1, saying which, when a goal is missed. The engine part needs neither Ray nor the service.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path

log = logging.getLogger("loadtests.bench_portfolio")

ENGINE_GOAL = 2.5  # engine time / arithmetic limit, at most
SERVICE_GOAL = 1.2  # service time / engine time, at most
# one call's series: a service replica's batch holds about this many at lookback 251 (its
# prefill cap of 2,048 history tokens on a CPU)
DEFAULT_SERIES_PER_CALL = 8
DEFAULT_PASSES = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--symbols", type=int, default=1000)
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument("--lookback", type=int, default=None, help="default: max_context - horizon")
    p.add_argument("--series-per-call", type=int, default=DEFAULT_SERIES_PER_CALL,
                   help="series of one engine call (default %(default)s)")
    p.add_argument("--passes", type=_at_least_one, default=DEFAULT_PASSES,
                   help="times each side is timed; its figure is the fastest (default "
                        "%(default)s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads of the engine and the matrix probe (0: torch's default)")
    p.add_argument("--service", action="store_true",
                   help="also time the same request through the service (starts Ray Serve; wrap "
                        "in flock /tmp/kronos-ray.lock on a shared machine)")
    p.add_argument("--replicas", type=int, default=1, help="service replicas (with --service)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def requires(args: argparse.Namespace) -> list:
    """The ``serve`` extra, only with ``--service``."""
    if not args.service:
        return []
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(SERVE_MODULES)


def matrix_shapes(cfg, tok, call_rows: int, prefill_rows: int) -> list[tuple[str, int, int, int]]:
    """(name, rows, inner, out) of the model's main products at one call's rows."""
    d = cfg.d_model
    return [
        ("trunk d x d, decode rows", call_rows, d, d),
        ("trunk d x d, prefill rows", prefill_rows, d, d),
        ("fused q/k/v d x 3d, prefill rows", prefill_rows, d, 3 * d),
        ("MLP gate+value d x 2ff, prefill rows", prefill_rows, d, 2 * cfg.ff_dim),
        ("MLP down ff x d, decode rows", call_rows, cfg.ff_dim, d),
        ("head d x 1,024, decode rows", call_rows, d, 2**cfg.s1_bits),
        ("tokenizer 64 x 64, prefill rows", prefill_rows, tok.d_model, tok.d_model),
    ]


def matmul_rate(rows: int, inner: int, out: int, seconds: float = 0.25) -> float:
    """FLOP/s of (rows x inner) @ (inner x out) in float32, best of short timed loops."""
    import torch

    a, b = torch.randn(rows, inner), torch.randn(inner, out)
    torch.mm(a, b)
    flops = 2 * rows * inner * out
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t0) / 4)
    return flops / best


def engine_side(args, predictor, windows, options) -> list[tuple[float, float]]:
    """(wall seconds, this process's CPU seconds) of each of ``args.passes`` passes of the
    engine over every window, in calls of ``args.series_per_call``."""
    warm = windows.chunk(0, args.series_per_call)
    predictor.forecast(warm.values, warm.x_stamps, warm.y_stamps, options)  # oneDNN warm-up
    passes = []
    for _ in range(args.passes):
        t0, c0 = time.perf_counter(), time.process_time()
        for start in range(0, len(windows), args.series_per_call):
            part = windows.chunk(start, start + args.series_per_call)
            predictor.forecast(part.values, part.x_stamps, part.y_stamps, options)
        passes.append((time.perf_counter() - t0, time.process_time() - c0))
    return passes


def service_side(args, symbols: list[str], lookback: int,
                 horizon: int) -> list[tuple[float, int]]:
    """``args.passes`` timed ``POST /v1/forecast`` of ``symbols`` at the model's sampling
    defaults, one after another on one service start, after a small warm-up request:
    (seconds, forecasts answered) of each."""
    import httpx
    import ray

    from loadtests.bench import _free_port
    from service.cli import start, stop
    from service.common.settings import Settings

    cores = os.cpu_count() or 1
    settings = Settings().model_copy(update=dict(
        num_replicas=args.replicas, device="cpu", port=_free_port(),
        replica_cpus=max(1, cores // args.replicas),
    ))
    settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
    body = {"symbols": symbols, "horizon": horizon, "lookback": lookback, "seed": 0,
            "record": False}
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        url = start(settings)
        client = httpx.Client(base_url=url, timeout=3600)
        client.post("/v1/forecast", json={**body, "symbols": symbols[:4]}).raise_for_status()
        passes = []
        for _ in range(args.passes):
            t0 = time.perf_counter()
            r = client.post("/v1/forecast", json=body)
            seconds = time.perf_counter() - t0
            r.raise_for_status()
            passes.append((seconds, len(r.json()["forecasts"])))
        return passes
    finally:
        stop()


def _seconds(values) -> str:
    """Pass times and their median, as printed."""
    values = list(values)
    listed = ", ".join(f"{v:.2f}" for v in values)
    return f"{listed} s (median {statistics.median(values):.2f} s)"


def run(args: argparse.Namespace) -> int:
    import torch

    from kronos_core.base.options import ForecastOptions
    from kronos_core.data import portfolio_windows
    from kronos_core.loading import PredictorConfig, load_predictor
    from kronos_core.plan.portfolio import forecast_flops

    if args.threads:
        torch.set_num_threads(args.threads)
    predictor = load_predictor(PredictorConfig(device="cpu"))
    cfg, tok = predictor.model.config, predictor.tokenizer.config
    paths = predictor.sampling.sample_count
    lookback = args.lookback or predictor.max_context - args.horizon
    windows = portfolio_windows.sample_store_windows(args.symbols, lookback, args.horizon)
    options = ForecastOptions(
        args.horizon, sample_count=paths, seed=0
    ).with_defaults(predictor.sampling)
    threads = torch.get_num_threads()
    print(f"kronos bench portfolio: {len(windows)} sample-store symbols, lookback {lookback}, "
          f"horizon {args.horizon}, the model's defaults ({paths} paths, temperature "
          f"{options.temperature}, top-p {options.top_p}), {threads} torch threads, "
          f"{args.series_per_call} series a call, {args.passes} pass(es) a side")

    engine_passes = engine_side(args, predictor, windows, options)
    engine_s = min(wall for wall, _ in engine_passes)
    engine_cpu_s = min(cpu for _, cpu in engine_passes)

    call_rows = args.series_per_call * paths
    shapes = matrix_shapes(cfg, tok, call_rows, args.series_per_call * lookback)
    rates = [(name, rows, k, n, matmul_rate(rows, k, n)) for name, rows, k, n in shapes]
    rate = statistics.median(r for *_, r in rates)
    print("matrix speed at the model's shapes (float32):")
    for name, rows, k, n, r in rates:
        print(f"  {name:<38} ({rows} x {k}) @ ({k} x {n}): {r / 1e9:7.1f} GFLOP/s")
    print(f"  median: {rate / 1e9:.1f} GFLOP/s (the limit's rate)")

    flops = forecast_flops(cfg, tok, [len(v) for v in windows.values], args.horizon, paths,
                           predictor.max_context)
    limit_s = flops.total / rate
    print(f"arithmetic: {flops.total / 1e12:.3f} TFLOP (tokenize {flops.tokenize / 1e9:.0f}, "
          f"prefill {flops.prefill / 1e9:.0f}, decode {flops.decode / 1e9:.0f}, token-to-candle "
          f"{flops.detokenize / 1e9:.0f} GFLOP): limit {limit_s:.2f} s at {rate / 1e9:.1f} "
          "GFLOP/s")
    engine_ratio = engine_s / limit_s
    print(f"engine passes: {_seconds(wall for wall, _ in engine_passes)}")
    print(f"engine: {engine_s:.2f} s, the fastest pass ({engine_s / len(windows) * 1e3:.1f} ms "
          f"a symbol, {flops.total / engine_s / 1e9:.1f} GFLOP/s); engine / limit = "
          f"{engine_ratio:.2f}x (goal <= {ENGINE_GOAL})")
    # on a loaded machine the wall time counts other processes' turns; with one torch thread the
    # CPU time does not (with more, it counts their waits too)
    cpu_ratio = engine_cpu_s / threads / limit_s
    print(f"engine CPU time: {engine_cpu_s:.2f} s over {threads} thread(s), the least of a pass: "
          f"{cpu_ratio:.2f}x the limit (what a loaded machine inflates least; not the goal)")
    figures = {
        "symbols": len(windows), "lookback": lookback, "horizon": args.horizon, "paths": paths,
        "threads": threads, "series_per_call": args.series_per_call, "passes": args.passes,
        "engine_s": engine_s, "engine_cpu_s": engine_cpu_s, "engine_cpu_over_limit": cpu_ratio,
        "engine_passes_s": [wall for wall, _ in engine_passes],
        "engine_passes_cpu_s": [cpu for _, cpu in engine_passes],
        "engine_median_over_limit": statistics.median(w for w, _ in engine_passes) / limit_s,
        "matrix_rates": [{"shape": name, "rows": rows, "inner": k, "out": n, "flops_per_s": r}
                         for name, rows, k, n, r in rates],
        "limit_rate_flops_per_s": rate, "flops": flops.total,
        "flops_parts": {"tokenize": flops.tokenize, "prefill": flops.prefill,
                        "decode": flops.decode, "detokenize": flops.detokenize},
        "limit_s": limit_s, "engine_over_limit": engine_ratio, "engine_goal": ENGINE_GOAL,
        "load_average": os.getloadavg(),
    }
    missed = []
    if engine_ratio > ENGINE_GOAL:
        missed.append(f"engine / limit {engine_ratio:.2f} > {ENGINE_GOAL}")
    if args.service:
        service_passes = service_side(args, windows.symbols, lookback, args.horizon)
        service_s = min(seconds for seconds, _ in service_passes)
        answered = min(count for _, count in service_passes)  # the fewest any pass answered
        service_ratio = service_s / engine_s
        print(f"service passes: {_seconds(seconds for seconds, _ in service_passes)}")
        print(f"service: {service_s:.2f} s, the fastest pass ({answered} forecasts at least, "
              f"{args.replicas} replica(s)); service / engine = {service_ratio:.2f}x (goal <= "
              f"{SERVICE_GOAL})")
        figures.update(service_s=service_s, service_over_engine=service_ratio,
                       service_goal=SERVICE_GOAL, forecasts_answered=answered,
                       service_passes_s=[seconds for seconds, _ in service_passes])
        if service_ratio > SERVICE_GOAL:
            missed.append(f"service / engine {service_ratio:.2f} > {SERVICE_GOAL}")
        if answered != len(windows):
            missed.append(f"the service answered {answered} of {len(windows)} forecasts")
    load = os.getloadavg()
    print(f"load average during the run: {load[0]:.1f} (this machine has {os.cpu_count()} cores; "
          "a loaded machine inflates every wall time here)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**figures, "missed": missed}, indent=2))
    if missed:
        print("GOAL MISSED: " + "; ".join(missed))
        return 1
    print("goals met")
    return 0
