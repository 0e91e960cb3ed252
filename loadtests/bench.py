"""Service vs engine benchmark: one ``POST /v1/forecast`` for N symbols of the store,
end to end over HTTP, against ``KronosPredictor.forecast`` called directly on the same
windows, in the same run.

    kronos bench service                          # 1,000 symbols, bundled model, sample store, 2
    CPU replicas kronos bench service --replicas 1 --horizon 120 --json out.json
    python -m loadtests.bench ...                 # the same

The engine side gets all of this machine's cores as torch threads; the service side gets
the same cores split over its replicas (one torch thread per core). Both use the same seed,
and the bench checks that they return the same forecasts (seeded sampling is batch-invariant).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time

import numpy as np

from loadtests.report import publish

log = logging.getLogger("loadtests.bench")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--symbols", type=int, default=1000)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--lookback", type=int, default=None, help="default: max_context - horizon")
    p.add_argument("--sample-count", type=int, default=1)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--store", default=None, help="default: the bundled sample store")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", default=None, help="write the figures here")


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtests.bench``: ``kronos bench service``, through the same command line
    (flags, help, logging)."""
    from kronos_core.cli import main as kronos_main

    return kronos_main(["bench", "service", *(sys.argv[1:] if argv is None else argv)])


def _engine_side(args, settings, store, symbols: list[str], lookback: int | None, cores: int):
    """The engine called directly on the same windows, same seed, all cores: (result, seconds,
    lookback, device). The series and their future timestamps come from the gateway's own prepare
    stage (each symbol's exchange calendar included), so both sides forecast exactly the same
    inputs. Runs first, so that no Ray process is still winding down meanwhile."""
    import torch

    from kronos_core.base.options import ForecastOptions
    from kronos_core.loading import load_predictor
    from service.common.schemas import ForecastRequest
    from service.gateway import FutureTimestamps
    from service.gateway.prepare import prepare

    torch.set_num_threads(cores)
    device = "cuda" if (args.device != "cpu" and torch.cuda.is_available()) else "cpu"
    predictor = load_predictor(settings.predictor_config(device=device))
    if lookback is None:
        lookback = predictor.max_context - args.horizon
    req = ForecastRequest(symbols=symbols, horizon=args.horizon, lookback=lookback,
                          sample_count=args.sample_count, seed=1234, record=False)
    prep = prepare(req, lookback, store, FutureTimestamps(), settings.min_history_warning)
    series, xts, yts = prep.values, prep.x_ts, prep.y_ts
    options = ForecastOptions(args.horizon, sample_count=args.sample_count, seed=1234)
    predictor.forecast(series[:8], xts[:8], yts[:8], options)  # warm-up
    t0 = time.perf_counter()
    res = predictor.forecast(series, xts, yts, options)
    if device == "cuda":
        torch.cuda.synchronize()
    return res, time.perf_counter() - t0, lookback, device


def _service_side(args, settings, body: dict, cores: int) -> tuple[dict, float, float]:
    """One timed ``POST /v1/forecast`` after a warm-up: (response, seconds, startup seconds)."""
    import httpx
    import ray

    from service.cli import start, stop

    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        url = start(settings)
        startup = time.perf_counter() - t0
        client = httpx.Client(base_url=url, timeout=600)
        # warm-up: a small request through every replica, then the timed one
        warm = client.post(
            "/v1/forecast", json={**body, "symbols": body["symbols"][: 4 * args.replicas]}
        )
        warm.raise_for_status()
        t0 = time.perf_counter()
        r = client.post("/v1/forecast", json=body)
        service_s = time.perf_counter() - t0
        r.raise_for_status()
        resp = r.json()
        assert len(resp["forecasts"]) == len(body["symbols"]), (
            len(resp["forecasts"]),
            resp["errors"][:3],
        )
    finally:
        stop()
    return resp, service_s, startup


def requires(args: argparse.Namespace) -> list:
    """The ``serve`` extra: the benchmark starts the service."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(SERVE_MODULES)


def run(args: argparse.Namespace) -> int:
    from kronos_core.data.store import KlineStore
    from service.common.settings import Settings

    cores = os.cpu_count() or 1
    overrides = dict(
        num_replicas=args.replicas,
        device=args.device,
        port=_free_port(),
        replica_cpus=max(1, cores // args.replicas) if args.device != "cuda" else None,
    )
    if args.store:
        overrides["store_dir"] = args.store
    settings = Settings().model_copy(update=overrides)
    settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
    store = KlineStore(settings.resolved_store_dir())  # = settings.store_dir, resolved above
    symbols = store.symbols()[: args.symbols]
    if len(symbols) < args.symbols:
        log.warning("store holds %d symbols, asked for %d", len(symbols), args.symbols)

    res, engine_s, lookback, device = _engine_side(
        args, settings, store, symbols, args.lookback, cores
    )
    body = {
        "symbols": symbols,
        "horizon": args.horizon,
        "lookback": lookback,
        "sample_count": args.sample_count,
        "seed": 1234,
    }
    resp, service_s, startup = _service_side(args, settings, body, cores)

    svc_close = np.array([f["mean"]["close"] for f in resp["forecasts"]], np.float32)
    same = bool(np.allclose(svc_close, res.mean[:, :, 3], rtol=1e-4, atol=1e-4))
    figures = {
        "symbols": len(symbols),
        "horizon": args.horizon,
        "lookback": lookback,
        "sample_count": args.sample_count,
        "replicas": args.replicas,
        "cores": cores,
        "device": device,
        "service_seconds": round(service_s, 3),
        "engine_seconds": round(engine_s, 3),
        "ratio": round(service_s / engine_s, 3),
        "goal_ratio": 1.25,
        "service_timing_ms": resp["timing"],
        "startup_seconds": round(startup, 1),
        "same_forecasts": same,
    }
    publish(
        figures,
        args.json,
        f"service {service_s:.3f} s  engine {engine_s:.3f} s  ratio "
        f"{service_s / engine_s:.2f} (goal <= 1.25); same forecasts: {same}",
    )
    return 0 if same else 1  # the service must answer what the engine does


if __name__ == "__main__":
    sys.exit(main())
