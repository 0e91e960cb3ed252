"""One step loop of a CPU replica under a big request with a small one every second, without Ray:
what the replica's scheduling policy costs, measured in a minute instead of ``kronos bench mixed``'s
six.

    python scripts/step_loop_bench.py                       # the CPU defaults
    python scripts/step_loop_bench.py --share-within-request --max-step-rows 25
    python scripts/step_loop_bench.py --json            # the figures as one JSON object

A ``StepRunner`` (the bundled model, one torch thread, as each loop of a CPU replica) is fed the
shards of one big request two at a time (``--shards`` shards of 62 series, lookback 200, horizon 24,
as the gateway cuts a 1,000-symbol request for a one-replica service), alone, then with a
5-series request every second (the next one a second after the last was sent, or once it is
answered), in ``--rounds`` rounds bracketed by alone runs as ``kronos bench mixed`` does. Prints the
big request's time alone and with the small ones, their ratio (median over rounds), the loop time
each small request cost the big one, and the small request's latency alone and beside the big one.
A service has one loop per core, so a small request's cost there is shared by two loops: its ratio
is about 1 + (this loop time + the gateway's and proxy's CPU per request) / 2 per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd
import torch

from kronos_core.base.candles import FEATURES
from kronos_core.base.options import ForecastOptions
from kronos_core.data.reader import read_candles
from kronos_core.data.sample_store import REAL_DIR
from kronos_core.loading import PredictorConfig, load_predictor
from service.common.messages import Shard
from service.replica.memory import memory_model_for
from service.replica.policy import BatchingPolicy
from service.replica.step_runner import StepRunner

SMALL_SERIES = 5


def _candles() -> pd.DataFrame:
    """The bundled GOOG daily candles, read and validated as every candle file is."""
    return read_candles(REAL_DIR / "goog_daily.csv")[0]


def shard(
    frame: pd.DataFrame, series: int, lookback: int, horizon: int, request_id: str, first: int,
    index: int,
) -> Shard:
    """``series`` windows of the bundled GOOG daily candles (one every 37 rows from ``first``)."""
    options = ForecastOptions(horizon=horizon, seed=1234)
    values, xts, yts = [], [], []
    for i in range(series):
        start = (37 * (first + i)) % (len(frame) - lookback - horizon)
        part = frame.iloc[start : start + lookback + horizon]
        values.append(part[list(FEATURES)].to_numpy(np.float32)[:lookback])
        ts = part["timestamps"].to_numpy("datetime64[ns]")
        xts.append(ts[:lookback])
        yts.append(ts[lookback:])
    return Shard(request_id, index, values, xts, yts, options)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=6, help="shards of the big request")
    p.add_argument("--shard-series", type=int, default=62, help="series of each of its shards")
    p.add_argument("--lookback", type=int, default=200)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--small-every", type=float, default=1.0, help="seconds between small requests")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-step-rows", type=int, default=20)
    p.add_argument("--max-prefill-tokens", type=int, default=2048)
    p.add_argument("--share-within-request", action="store_true")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = PredictorConfig(device="cpu")
    predictor = load_predictor(config)
    frame = _candles()
    n, lb, h = args.shard_series, args.lookback, args.horizon
    bigs = [shard(frame, n, lb, h, "big", n * k, k) for k in range(args.shards)]
    small = shard(frame, SMALL_SERIES, lb, h, "small", 999, 0)
    policy = BatchingPolicy(
        max_prefill_tokens=args.max_prefill_tokens,
        max_step_rows=args.max_step_rows,
        share_within_request=args.share_within_request,
        budget_bytes=1 << 30,
    )
    memory = memory_model_for(
        predictor.model.config, predictor.tokenizer.config, predictor.max_context, config.sliding
    )

    def run(with_small: bool) -> tuple[float, list[float]]:
        """The big request's seconds (two shards in flight), and the small ones' latencies."""
        runner = StepRunner(predictor, "bench", "cpu", policy=policy, memory_model=memory)
        queue, done, latencies = list(bigs), [], []
        in_flight = 0
        sent: float | None = None  # when the small request in flight was sent
        next_small = time.perf_counter() + min(0.2, args.small_every)

        def big_done(_res) -> None:
            nonlocal in_flight
            in_flight -= 1
            done.append(1)

        def small_done(_res) -> None:
            nonlocal sent, next_small
            now = time.perf_counter()
            assert sent is not None
            latencies.append(now - sent)
            next_small, sent = max(now, sent + args.small_every), None

        t0 = time.perf_counter()
        big_s: float | None = None
        # the small request in flight when the big one ends still finishes (and counts)
        while big_s is None or sent is not None:
            while in_flight < 2 and queue:
                runner.submit(queue.pop(0), big_done)
                in_flight += 1
            if big_s is None and with_small and sent is None and time.perf_counter() >= next_small:
                sent = time.perf_counter()
                runner.submit(small, small_done)
            runner.tick()
            if big_s is None and len(done) == len(bigs):
                big_s = time.perf_counter() - t0
        return big_s, latencies

    run(False)  # warm-up
    alone, with_small, smalls, counts = [], [], [], []
    for _ in range(args.rounds):
        alone.append(run(False)[0])
        seconds, latencies = run(True)
        with_small.append(seconds)
        smalls += latencies
        counts.append(len(latencies))
    alone.append(run(False)[0])
    if not smalls:
        raise SystemExit(
            "no small request ran beside the big one: give a shorter --small-every or a bigger "
            "request (--shards, --shard-series, --horizon)"
        )
    around = [(a + b) / 2 for a, b in zip(alone, alone[1:])]
    ratio = statistics.median(w / a for w, a in zip(with_small, around))
    per_small = statistics.median(
        [(w - a) / n for w, a, n in zip(with_small, around, counts) if n] or [float("nan")]
    )
    idle = []
    runner = StepRunner(predictor, "bench", "cpu", policy=policy, memory_model=memory)
    for _ in range(5):
        t0 = time.perf_counter()
        runner.submit(small, lambda _res: None)
        runner.run_until_idle()
        idle.append(time.perf_counter() - t0)
    idle_s, beside_s = statistics.median(idle), statistics.median(smalls)
    if args.json:
        print(json.dumps({
            "max_step_rows": args.max_step_rows, "share_within_request": args.share_within_request,
            "big_alone_s": alone, "big_with_small_s": with_small, "ratio": ratio,
            "loop_s_per_small": per_small, "small_alone_s": idle_s, "small_beside_big_s": beside_s,
            "small_requests": len(smalls),
        }))
        return
    print(
        f"max_step_rows {args.max_step_rows}, share_within_request {args.share_within_request}: "
        f"big alone {[round(x, 2) for x in alone]} s, with a small one every "
        f"{args.small_every:g} s {[round(x, 2) for x in with_small]} s -> {ratio:.3f}x "
        f"(median of {args.rounds}); "
        f"loop time per small request {per_small * 1e3:.0f} ms; small request alone "
        f"{idle_s * 1e3:.0f} ms, beside the big one {beside_s * 1e3:.0f} ms "
        f"({beside_s / idle_s:.2f}x, max {max(smalls) * 1e3:.0f} ms, {len(smalls)} requests)"
    )


if __name__ == "__main__":
    main()
