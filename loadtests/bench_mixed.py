"""``kronos bench mixed``: small requests beside big ones, through the service under its defaults.

    kronos bench mixed # starts `kronos serve --replicas 2` on the sample store
    kronos bench mixed --quick               # small sizes (a smoke test, ~1 min)
    kronos bench mixed --host http://127.0.0.1:8000 --json out.json # a running service (loopback)

Measures, in one run (ratios are within the run):

* ``small_idle``: the small request (5 symbols, horizon 24, lookback 200) alone (median of a few);
  ``small_beside_big``: the same while a 1,000-symbol request runs (median and worst).
  Goal: beside big <= 2x idle.
* ``big_alone`` / ``big_with_small``: the big request's time alone and while small ones keep coming
  (and beside a single small one), in rounds of the three run back to back and one more alone run:
  each ratio is the median over rounds of a run against the mean of the alone runs before and after
  it (the machine's speed drifts); times are medians, every run is in the JSON. Goal: <= 10% slower.
* ``cpu_per_small_s``: what each small request beside the big one cost the machine, in CPU seconds:
  the CPU the whole machine used during each "with small ones" run (``/proc/stat``: the service,
  Ray and this bench), less the mean of what the bracketing alone runs used (the same big request's
  work), over the small requests of the run; the median over rounds (Linux only; no goal). Not a
  rate: on cores the big request keeps busy, a run's CPU is cores x its wall time whatever it does.
  There, ``big_with_small_over_alone`` is about ``1 / (1 - cpu_per_small_s / (cores x
  small_every_s))``: the CPU figure says what the ratio means in CPU per request.
* ``mixed``: concurrent clients with different horizons, lookbacks and sample counts for a while, in
  row-steps/s (series x sample paths x horizon steps answered per second), against the engine's
  single-batch throughput on the same work, measured in this process beforehand: each shape's
  row-steps at that shape's single-batch rate (a row-step past the model's context recomputes the
  whole window and costs ~13x one within it, so one rate for every shape would measure the mix, not
  the service).
  Goal: >= 80%. ``mixed_over_engine_one_shape`` (no goal) is the plain ratio against the big
  request's shape.
* Every service the bench starts records its answers in an empty ledger of its own (``--ledger``
  to a new temporary folder), so no run inherits the scoring work of the ones before it.
* ``first`` / ``warm``: the first request after the service reports ready against the median of the
  next few (only when the bench starts the service), on ``first_starts`` (3) fresh starts: the ratio
  is the median of theirs. Goal: <= 1.2x.

Prints a table and writes the figures as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlparse

log = logging.getLogger("loadtests.bench_mixed")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Sizes:
    small: int = 5
    big: int = 1000
    horizon: int = 24
    lookback: int = 200
    repeats: int = 5  # small requests timed alone
    mixed_s: float = 30.0  # seconds of mixed load
    mixed_clients: int = 8
    engine_series: int = 256  # the engine's single batch
    mix_series: int = 128  # the engine's single batch of each mixed shape (the same-work baseline)
    small_every_s: float = 1.0  # beside the big request: a small one this often (one after another)
    big_rounds: int = 3  # rounds of (big alone, big with small ones, big with one small one)
    # fresh service starts whose first request is timed (the bench's own and more)
    first_starts: int = 3


QUICK = Sizes(
    small=3, big=60, horizon=8, lookback=64, repeats=3, mixed_s=6.0, mixed_clients=3,
    engine_series=32, mix_series=16, small_every_s=0.2, big_rounds=1, first_starts=1,
)
MIXED_SHAPES = [  # (symbols, horizon, lookback, sample_count) the mixed clients cycle through
    (5, 24, 200, 1), (50, 12, 400, 1), (20, 48, 100, 2), (100, 24, 256, 1), (10, 6, 64, 4),
    (200, 24, 200, 1),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host", default=None, help="running service (loopback only); default: start one"
    )
    p.add_argument("--replicas", type=int, default=2, help="when starting the service")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--mixed-seconds", type=float, default=None, help="duration of the mixed load")
    p.add_argument("--json", default=None, help="write the figures here")


def _post(client, body: dict, timings: list | None = None) -> float:
    """Seconds one POST /v1/forecast took end to end; the service's own ``timing`` appended to
    ``timings``."""
    t0 = time.perf_counter()
    r = client.post("/v1/forecast", json=body)
    elapsed = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"POST /v1/forecast answered {r.status_code}: {r.text[:300]}")
    if timings is not None:
        timings.append(
            {k: r.json()["timing"].get(k) for k in ("read_ms", "forecast_ms", "total_ms")}
        )
    return elapsed


def _body(symbols: list[str], horizon: int, lookback: int, sample_count: int = 1) -> dict:
    return {
        "symbols": symbols, "horizon": horizon, "lookback": lookback, "sample_count": sample_count,
        "seed": 1234,
    }


class _Engine:
    """The engine in this process, all cores: single batches of store series, timed."""

    def __init__(self, symbols: list[str]):
        import torch

        from kronos_core.data.store import KlineStore
        from kronos_core.loading import load_predictor
        from service.common.settings import Settings
        from service.gateway import FutureTimestamps

        settings = Settings()
        torch.set_num_threads(os.cpu_count() or 1)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.predictor = load_predictor(settings.predictor_config(device=self.device))
        self.store = KlineStore(settings.resolved_store_dir())
        self.future = FutureTimestamps()
        self.symbols = symbols
        self.seconds(8, 8, 64)  # warm-up

    def seconds(self, series: int, horizon: int, lookback: int, sample_count: int = 1) -> float:
        """One forecast of ``series`` store series as one batch, in seconds."""
        import numpy as np
        import pandas as pd
        import torch

        from kronos_core.base.options import ForecastOptions

        batch = self.store.read_windows(self.symbols[:series], lookback)
        values = [np.asarray(w.values, np.float32) for w in batch.windows]
        xts = [pd.DatetimeIndex(w.timestamps) for w in batch.windows]
        yts = [self.future(w.timestamps, horizon) for w in batch.windows]
        options = ForecastOptions(horizon, sample_count=sample_count, seed=1234)
        t0 = time.perf_counter()
        self.predictor.forecast(values, xts, yts, options)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0


def _engine_throughput(
    sizes: Sizes, symbols: list[str], shapes: list[tuple[int, int, int, int]]
) -> dict:
    """The engine's single-batch throughput in row-steps/s, in this process, all cores: for the big
    request's shape (``series`` of lookback/horizon as the bench's requests), and for each mixed
    shape (``mix_series`` series of that horizon, lookback and sample count): the same-work baseline
    of the mixed load, since a row-step's cost depends on the shape (past the model's context every
    step recomputes the whole window: at lookback 256 and above a row-step costs ~13x one at 200
    here)."""
    engine = _Engine(symbols)
    n = min(sizes.engine_series, len(symbols))
    seconds = engine.seconds(n, sizes.horizon, sizes.lookback)
    per_shape = []
    for _n, h, lb, sc in shapes:
        m = min(sizes.mix_series, len(symbols))
        per_shape.append(round(m * sc * h / engine.seconds(m, h, lb, sc), 1))
    return {"series": n, "seconds": round(seconds, 3), "device": engine.device,
            "row_steps_per_s": round(n * sizes.horizon / seconds, 1),
            "mix_series": sizes.mix_series, "shape_row_steps_per_s": per_shape}


def mixed_shapes(sizes: Sizes) -> list[tuple[int, int, int, int]]:
    """(symbols, horizon, lookback, sample_count) the mixed clients cycle through (scaled down with
    --quick)."""
    if sizes != QUICK:
        return list(MIXED_SHAPES)
    return [
        (max(1, n // 10), max(2, h // 4), max(16, lb // 8), sc) for n, h, lb, sc in MIXED_SHAPES
    ]


def bracketed_ratio(runs: list[float], alone: list[float]) -> float:
    """Median over rounds of ``runs[i]`` against the mean of ``alone[i]`` and ``alone[i + 1]`` (the
    alone runs just before and after it)."""
    if len(alone) != len(runs) + 1:
        raise ValueError(
            f"{len(runs)} runs need {len(runs) + 1} alone runs around them, got {len(alone)}"
        )
    return statistics.median(r / ((a + b) / 2) for r, a, b in zip(runs, alone, alone[1:]))


def _met(ratio: float | None, op: str, goal: float) -> bool | None:
    if ratio is None:
        return None
    return ratio <= goal if op == "<=" else ratio >= goal


def _rounded(xs: list[float]) -> list[float]:
    return [round(x, 3) for x in xs]


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``: all but idle and
    iowait), or None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def cpu_per_small(
    alone: list[float | None], with_small: list[float | None], smalls: list[int]
) -> float | None:
    """CPU seconds each small request cost: per round, the CPU of the run with small ones less
    the mean CPU of the alone runs just before and after it, over the run's small requests -> the
    median over rounds. ``alone`` / ``with_small``: busy CPU seconds of each run (None: unknown)."""
    per_round = []
    for cpu, n, a, b in zip(with_small, smalls, alone, alone[1:]):
        if cpu is None or a is None or b is None or n == 0:
            return None
        per_round.append((cpu - (a + b) / 2) / n)
    return statistics.median(per_round) if per_round else None


def _timed_cpu(run):
    """``run()``'s result and the machine's busy CPU seconds over it."""
    c0 = busy_cpu_s()
    out = run()
    c1 = busy_cpu_s()
    return out, None if c0 is None or c1 is None else c1 - c0


def _big_with_smalls(
    client_factory, big: dict, small: dict, every_s: float
) -> tuple[float, list[float]]:
    """The big request's time while a small one is sent every ``every_s`` seconds (the next one once
    the last is answered); the small ones' latencies."""
    smalls: list[float] = []
    done = threading.Event()
    out: dict[str, float] = {}

    def run_big() -> None:
        with client_factory() as c:
            out["big"] = _post(c, big)
        done.set()

    t = threading.Thread(target=run_big)
    t.start()
    with client_factory() as c:
        time.sleep(0.2)  # the big request is on the replicas
        while not done.is_set():
            t0 = time.perf_counter()
            smalls.append(_post(c, small))
            done.wait(
                None if every_s == float("inf") else max(0.0, every_s - (time.perf_counter() - t0))
            )
    t.join()
    return out["big"], smalls


def _mixed(client_factory, symbols: list[str], sizes: Sizes, seconds: float) -> dict:
    """Concurrent clients cycling through ``mixed_shapes`` for ``seconds``; row-steps answered in
    all and of each shape."""
    shapes = mixed_shapes(sizes)
    lock = threading.Lock()
    totals = {"requests": 0, "row_steps": 0, "failures": 0}
    per_shape = [0] * len(shapes)
    stop_at = time.perf_counter() + seconds

    def client(k: int) -> None:
        i = k
        with client_factory() as c:
            while time.perf_counter() < stop_at:
                k_shape = i % len(shapes)
                n, h, lb, sc = shapes[k_shape]
                first = (i * 37) % max(1, len(symbols) - n)
                try:
                    _post(c, _body(symbols[first:first + n], h, lb, sc))
                    with lock:
                        totals["requests"] += 1
                        totals["row_steps"] += n * sc * h
                        per_shape[k_shape] += n * sc * h
                except Exception as exc:  # counted, the load goes on
                    log.warning("mixed request failed: %s", exc)
                    with lock:
                        totals["failures"] += 1
                i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(sizes.mixed_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        **totals, "seconds": round(elapsed, 1),
        "row_steps_per_s": round(totals["row_steps"] / elapsed, 1), "shape_row_steps": per_shape,
    }


def same_work_ratio(mixed: dict, engine: dict) -> float:
    """The engine's time for the row-steps the mixed load got answered, each shape at that shape's
    single-batch rate, over the time the service took: 1.0 is the engine's own speed."""
    engine_s = sum(
        rs / rate for rs, rate in zip(mixed["shape_row_steps"], engine["shape_row_steps_per_s"])
    )
    return engine_s / (mixed["seconds"] or float("nan"))


def first_and_warm(client, small: dict, repeats: int, timings: list | None = None) -> dict:
    """The first request a just-started service answers, then ``repeats`` more: seconds, and the
    first against the median of the others."""
    first = _post(client, small, timings)
    warm = statistics.median([_post(client, small, timings) for _ in range(repeats)])
    return {"first_s": round(first, 4), "warm_s": round(warm, 4), "ratio": round(first / warm, 3)}


def extra_starts(sizes: Sizes, symbols: list[str], replicas: int) -> list[dict]:
    """``first_and_warm`` on ``first_starts - 1`` more fresh starts of the service (one sample a
    start, and the first request's time moves with the machine's load like any other: ~80-140 ms
    here)."""
    import httpx

    from loadtests.run import start_service, stop_service

    small = _body(symbols[:sizes.small], sizes.horizon, sizes.lookback)
    out = []
    for _ in range(sizes.first_starts - 1):
        host, server = start_service(replicas, _fresh_ledger())
        try:
            with httpx.Client(base_url=host, timeout=600) as c:
                out.append(first_and_warm(c, small, sizes.repeats))
        finally:
            stop_service(server)
    return out


def measure(host: str, sizes: Sizes, symbols: list[str], engine: dict, fresh: bool, mixed_s: float,
            other_starts: list[dict] | None = None) -> dict:
    import httpx

    def client_factory():
        return httpx.Client(base_url=host, timeout=600)

    small = _body(symbols[:sizes.small], sizes.horizon, sizes.lookback)
    big = _body(symbols[sizes.small:sizes.small + sizes.big], sizes.horizon, sizes.lookback)
    fig: dict = {"sizes": sizes.__dict__, "engine": engine}
    with client_factory() as c:
        timings: list[dict] = []
        # the first the service answers, when just started
        own = first_and_warm(c, small, sizes.repeats, timings)
        first, small_idle = own["first_s"], own["warm_s"]
        starts = [own, *(other_starts or [])] if fresh else []
        _post(c, big)  # unmeasured: the first big request may still warm the big shapes
    # rounds of (alone, with small ones, with one small one) run back to back, and one more alone
    # run at the end: each "with" run is compared with the mean of the alone runs just before and
    # after it, and the ratio is the median of the rounds' ratios. The machine's speed drifts
    # (identical 1,000-symbol requests took 5.7 to 10 s within minutes here); bracketing cancels a
    # drift slower than a round.
    alone_s, with_s, with_one_s, smalls, one = [], [], [], [], []
    alone_cpu, with_cpu, smalls_per_round = [], [], []  # busy CPU seconds of each run

    def alone_run() -> None:
        with client_factory() as c:
            t, cpu = _timed_cpu(lambda: _post(c, big))
        alone_s.append(t)
        alone_cpu.append(cpu)

    for _ in range(sizes.big_rounds):
        alone_run()
        (b, s), cpu = _timed_cpu(
            lambda: _big_with_smalls(client_factory, big, small, sizes.small_every_s)
        )
        with_s.append(b)
        with_cpu.append(cpu)
        smalls_per_round.append(len(s))
        smalls += s
        b, s = _big_with_smalls(client_factory, big, small, float("inf"))  # a single small request
        with_one_s.append(b)
        one += s
    alone_run()
    small_cpu = cpu_per_small(alone_cpu, with_cpu, smalls_per_round)
    log.info(
        "first %.3f s, small idle %.3f s, big alone %s, with small ones %s (%d small ones), with "
        "one %s",
        first, small_idle, _rounded(alone_s), _rounded(with_s), len(smalls), _rounded(with_one_s),
    )
    big_alone, big_with, big_with_one = (
        statistics.median(x) for x in (alone_s, with_s, with_one_s)
    )
    mixed = _mixed(client_factory, symbols, sizes, mixed_s)
    fig.update(
        {
            "small_idle_s": round(small_idle, 4),
            "small_beside_big_s": {
                "median": round(statistics.median(smalls), 4), "max": round(max(smalls), 4),
                "n": len(smalls),
            }
            if smalls
            else None, "big_alone_s": round(big_alone, 3), "big_with_small_s": round(big_with, 3),
            "small_requests_beside_big": len(smalls),
            "big_with_one_small_s": round(big_with_one, 3),
            "one_small_beside_big_s": round(statistics.median(one), 4) if one else None,
            "big_rounds_s": {
                "alone": _rounded(alone_s), "with_small": _rounded(with_s),
                "with_one_small": _rounded(with_one_s),
            },
            "cpu_per_small_s": None if small_cpu is None else round(small_cpu, 4),
            "mixed": mixed, "first_after_ready_s": round(first, 4) if fresh else None,
            "warm_s": round(small_idle, 4),
            # the gateway's read / forecast / total ms of each
            "service_timing_first_then_warm": timings,
            "first_after_ready_starts": starts,  # one per fresh start: first, median warm, ratio
        }
    )
    ratios: dict[str, float | None] = {
        "small_beside_big_over_idle": (statistics.median(smalls) / small_idle) if smalls else None,
        "big_with_small_over_alone": bracketed_ratio(with_s, alone_s),
        "big_with_one_small_over_alone": bracketed_ratio(with_one_s, alone_s),
        "mixed_over_engine": same_work_ratio(mixed, engine),
        "first_over_warm": statistics.median(x["ratio"] for x in starts) if starts else None,
    }
    goals = {
        "small_beside_big_over_idle": ("<=", 2.0), "big_with_small_over_alone": ("<=", 1.10),
        "big_with_one_small_over_alone": ("<=", 1.10), "mixed_over_engine": (">=", 0.80),
        "first_over_warm": ("<=", 1.20),
    }
    fig["ratios"] = {k: None if v is None else round(v, 3) for k, v in ratios.items()}
    # no goal: the mix against the big request's shape alone (see the module docstring)
    fig["mixed_over_engine_one_shape"] = round(
        mixed["row_steps_per_s"] / engine["row_steps_per_s"], 3
    )
    fig["goals"] = {
        k: {"goal": f"{op} {g}", "met": _met(ratios[k], op, g)} for k, (op, g) in goals.items()
    }
    return fig


def table(fig: dict) -> str:
    sb = fig["small_beside_big_s"] or {}
    rows = [
        ("small request alone (median)", f"{fig['small_idle_s']:.3f} s", ""),
        (
            "small beside the big one (median / max)",
            f"{sb.get('median', float('nan')):.3f} / {sb.get('max', float('nan')):.3f} s",
            "small_beside_big_over_idle",
        ),
        (
            f"big request alone (median of {fig['sizes']['big_rounds'] + 1})",
            f"{fig['big_alone_s']:.2f} s", "",
        ),
        (
            f"big request with a small one every {fig['sizes']['small_every_s']:g} s "
            f"({fig['small_requests_beside_big']})", f"{fig['big_with_small_s']:.2f} s",
            "big_with_small_over_alone",
        ),
        (
            "CPU each small request cost beside the big one (whole machine)",
            "-" if fig.get("cpu_per_small_s") is None else f"{fig['cpu_per_small_s']:.3f} s", "",
        ),
        (
            "big request with one small one", f"{fig['big_with_one_small_s']:.2f} s",
            "big_with_one_small_over_alone",
        ),
        (
            "mixed load (row-steps/s), against the engine on the same shapes",
            f"{fig['mixed']['row_steps_per_s']:.0f}", "mixed_over_engine",
        ),
        (
            "engine single batch, the big request's shape (row-steps/s)",
            f"{fig['engine']['row_steps_per_s']:.0f}", "",
        ),
        (
            "engine single batch of each mixed shape (row-steps/s)",
            " / ".join(f"{x:.0f}" for x in fig["engine"]["shape_row_steps_per_s"]), "",
        ),
        (
            f"first request after ready (median ratio of {len(fig['first_after_ready_starts'])} "
            "starts)",
            "-"
            if fig["first_after_ready_s"] is None
            else " / ".join(f"{x['first_s']:.3f}" for x in fig["first_after_ready_starts"]) + " s",
            "first_over_warm",
        ),
    ]
    out = ["| measure | value | ratio | goal | met |", "|---|---|---|---|---|"]
    for name, value, key in rows:
        ratio = fig["ratios"].get(key) if key else None
        goal = fig["goals"][key] if key else {"goal": "", "met": None}
        met = "" if goal["met"] is None else ("yes" if goal["met"] else "NO")
        out.append(
            f"| {name} | {value} | {'' if ratio is None else ratio} | {goal['goal']} | {met} |"
        )
    return "\n".join(out)


def _fresh_ledger() -> list[str]:
    """``kronos serve`` arguments for an empty forecast ledger of its own: the service records
    every answer as by default, but its gateway's background scoring does not start from what
    earlier runs left beside the sample store (its cost grows with the ledger), so every run
    measures from the same state. The folder is left in the system temp folder."""
    import tempfile

    return ["--ledger", tempfile.mkdtemp(prefix="kronos-bench-mixed-ledger-")]


def requires(args: argparse.Namespace) -> list:
    """The ``serve`` extra, unless ``--host`` names a running service (then httpx only)."""
    from kronos_core.cli.requirements import SERVE_MODULES, needs

    return needs(["httpx"]) if args.host else needs(SERVE_MODULES, "the service it starts")


def run(args: argparse.Namespace) -> int:
    from kronos_core.data.store import KlineStore
    from loadtests.run import start_service, stop_service
    from service.common.settings import Settings

    if args.host and urlparse(args.host).hostname not in LOOPBACK:
        print(
            f"kronos bench mixed: --host must be a loopback address, got {args.host}",
            file=sys.stderr,
        )
        return 2
    sizes = QUICK if args.quick else Sizes()
    mixed_s = args.mixed_seconds if args.mixed_seconds is not None else sizes.mixed_s
    symbols = KlineStore(Settings().resolved_store_dir()).symbols()
    if len(symbols) < sizes.small + sizes.big:
        log.warning(
            "store holds %d symbols; the big request gets fewer than %d", len(symbols), sizes.big
        )
    # first: nothing of the service runs meanwhile
    engine = _engine_throughput(sizes, symbols, mixed_shapes(sizes))
    server = None
    host = args.host
    others = [] if host else extra_starts(sizes, symbols, args.replicas)
    if not host:
        host, server = start_service(args.replicas, _fresh_ledger())
    try:
        fig = measure(
            host, sizes, symbols, engine, fresh=server is not None, mixed_s=mixed_s,
            other_starts=others,
        )
    finally:
        if server is not None:
            stop_service(server)
    fig["replicas"] = args.replicas if server is not None else None
    fig["cores"] = os.cpu_count()
    print(table(fig))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(fig, f, indent=2)
        print(f"wrote {args.json}")
    missed = [k for k, g in fig["goals"].items() if g["met"] is False]
    if missed and not args.quick:  # --quick sizes are a smoke test: its figures judge nothing
        print(f"goals missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtests.bench_mixed``: ``kronos bench mixed`` through the same command line."""
    from kronos_core.cli import main as kronos_main

    return kronos_main(["bench", "mixed", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
