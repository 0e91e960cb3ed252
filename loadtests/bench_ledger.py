"""Forecast-ledger benchmark: what recording costs a large request, and what it costs on disk.

    kronos bench ledger                           # 1,000 symbols, horizon 24, quantiles 0.1/0.5/0.9
    kronos bench ledger --rounds 5 --json out.json
    python -m loadtests.bench_ledger ...          # the same

One service (bundled model, sample store, ledger in a temporary folder, background scoring
off so that only recording is measured) answers the same 1,000-symbol request with
``"record": true`` and with ``"record": false`` (the ledger switched off for that request),
in the same run, alternating ABBA so that drift cancels. Overhead = median(on) / median(off)
- 1 (goal: at most 5 %). The answer never waits for the disk (a writer thread per gateway),
so the overhead is what the gateway does on the request path plus what the writer takes from
the next requests; the writer's own time to append each request is reported too.

Disk: the ledger's bytes per 1,000 recorded forecasts (symbol x request, here horizon 24 and
3 quantiles of the close; zstd Parquet, one file per request).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loadtests.report import publish

log = logging.getLogger("loadtests.bench_ledger")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--symbols", type=int, default=1000)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--lookback", type=int, default=128)
    p.add_argument("--sample-count", type=int, default=4)
    p.add_argument(
        "--rounds", type=int, default=3, help="ABBA rounds: each is 2 requests recorded, 2 not"
    )
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--device", default="auto")
    p.add_argument("--store", default=None, help="default: the bundled sample store")
    p.add_argument("--json", default=None, help="write the figures here")


def main(argv: list[str] | None = None) -> int:
    from kronos_core.cli import main as kronos_main

    return kronos_main(["bench", "ledger", *(sys.argv[1:] if argv is None else argv)])


def _ledger_bytes(root: Path) -> tuple[int, int]:
    """(bytes, files) of the forecast files (``date=`` partitions)."""
    files = [p for p in root.glob("date=*/*.parquet")]
    return sum(p.stat().st_size for p in files), len(files)


def _wait_written(root: Path, files: int, timeout: float = 120.0) -> float:
    """Seconds until the ledger holds ``files`` request files."""
    t0 = time.perf_counter()
    while _ledger_bytes(root)[1] < files:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"ledger did not reach {files} files in {timeout} s")
        time.sleep(0.02)
    return time.perf_counter() - t0


def _ready(client) -> bool:
    import httpx

    try:
        return client.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def requires(args: argparse.Namespace) -> list:
    """The ``serve`` extra: the benchmark starts the service."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(SERVE_MODULES)


def run(args: argparse.Namespace) -> int:
    import httpx
    import ray

    from kronos_core.data.store import KlineStore
    from loadtests.bench import _free_port
    from service.cli import start, stop
    from service.common.settings import Settings

    cores = os.cpu_count() or 1
    ledger = Path(tempfile.mkdtemp(prefix="kronos-bench-ledger-"))
    overrides = dict(
        num_replicas=args.replicas, device=args.device, port=_free_port(), ledger_dir=str(ledger),
        score_interval_s=0.0, request_timeout_s=3600.0,
        replica_cpus=max(1, cores // args.replicas) if args.device != "cuda" else None,
    )
    if args.store:
        overrides["store_dir"] = args.store
    settings = Settings().model_copy(update=overrides)
    settings = settings.model_copy(update={"store_dir": settings.resolved_store_dir()})
    symbols = KlineStore(settings.resolved_store_dir()).symbols()[: args.symbols]
    body = {"symbols": symbols, "horizon": args.horizon, "lookback": args.lookback,
            "sample_count": args.sample_count, "quantiles": [0.1, 0.5, 0.9], "seed": 1234}
    times: dict[bool, list[float]] = {True: [], False: []}
    writer_s: list[float] = []
    recorded = 0
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        url = start(settings)
        client = httpx.Client(base_url=url, timeout=3600)
        deadline = time.monotonic() + 600
        while not _ready(client):
            if time.monotonic() > deadline:
                raise TimeoutError("service not ready")
            time.sleep(0.5)
        for record in (False, True):  # warm-up, both paths, every replica
            client.post(
                "/v1/forecast", json={**body, "symbols": symbols[:64], "record": record}
            ).raise_for_status()
        _wait_written(ledger, 1)
        files = 1
        for _ in range(args.rounds):
            for record in (True, False, False, True):
                t0 = time.perf_counter()
                r = client.post("/v1/forecast", json={**body, "record": record})
                times[record].append(time.perf_counter() - t0)
                r.raise_for_status()
                n = len(r.json()["forecasts"])
                if record:
                    files += 1
                    recorded += n
                    # the append, after the answer went out
                    writer_s.append(_wait_written(ledger, files))
        client.close()
    finally:
        stop()
    size, nfiles = _ledger_bytes(ledger)
    size_per_file = size / max(1, nfiles)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    figures = {
        "symbols": len(symbols), "horizon": args.horizon, "lookback": args.lookback,
        "sample_count": args.sample_count, "quantiles": body["quantiles"],
        "replicas": args.replicas, "cores": cores, "device": args.device, "rounds": args.rounds,
        "seconds_recorded": [round(t, 3) for t in times[True]],
        "seconds_not_recorded": [round(t, 3) for t in times[False]],
        "median_recorded_s": round(on, 3), "median_not_recorded_s": round(off, 3),
        "overhead": round(on / off - 1, 4), "goal_overhead": 0.05,
        "writer_seconds_after_answer_median": round(statistics.median(writer_s), 3)
        if writer_s
        else None,
        # the writer thread's work after each answer, as a share of the request: the most it could
        # take from a request that followed at once (the ABBA runs wait for it, so "overhead"
        # excludes it)
        "writer_share_of_request": round(statistics.median(writer_s) / off, 4)
        if writer_s
        else None,
        "ledger_bytes_per_1000_forecasts": round(size_per_file / max(1, len(symbols)) * 1000),
        "ledger_bytes_per_request_file": round(size_per_file),
        "ledger_files": nfiles,
    }
    publish(
        figures, args.json,
        f"recorded {on:.3f} s, not recorded {off:.3f} s: overhead {100 * (on / off - 1):+.1f} % "
        f"(goal <= 5 %); disk {figures['ledger_bytes_per_1000_forecasts'] / 1024:.1f} KiB per "
        f"1,000 forecasts (horizon {args.horizon}, 3 quantiles)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
