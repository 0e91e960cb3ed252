"""What one small forecast costs the engine on a CPU: the work a step loop does for it.

    python scripts/small_request_cost.py                  # 5 series, lookback 200, horizon 24
    python scripts/small_request_cost.py --rows 10 --threads 2

Runs the bundled model's engine (``Generator`` -> ``Generation``, the path a service step loop
drives) on windows of the bundled GOOG daily candles, seeded top-p sampling as the service's
default, and prints the medians over ``--repeats`` runs: the first step (tokenize and prefill), a
decode step, the last step (which also detokenizes), the whole forecast and its process CPU time.
To compare two versions, run it from each checkout in turn, a few times each (this machine's
speed drifts): ``kronos bench mixed`` is the service-level benchmark; this isolates the engine's
share of a small request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd
import torch

from kronos_core.data.sample_store import REAL_DIR
from kronos_core.engine.batch import assemble
from kronos_core.engine.config import GenerationConfig
from kronos_core.engine.generate import Generator
from kronos_core.engine.sampling import row_keys
from kronos_core.loading import load_checkpoints

STAMP = [0, 10, 2, 5, 6]  # minute, hour, weekday, day, month: fixed (the cost hardly depends on it)


def windows(rows: int, lookback: int) -> list[np.ndarray]:
    """``rows`` z-scored windows of the bundled GOOG daily candles, each ``lookback`` long."""
    frame = pd.read_csv(REAL_DIR / "goog_daily.csv")
    values = frame[["open", "high", "low", "close", "volume"]].to_numpy(np.float64)
    values = np.concatenate([values, values[:, 3:4] * values[:, 4:5]], axis=1)  # amount
    span = len(values) - lookback
    out = []
    for i in range(rows):
        start = (37 * i) % span
        w = values[start : start + lookback]
        out.append(np.clip((w - w.mean(0)) / (w.std(0) + 1e-5), -5, 5).astype(np.float32))
    return out


def measure(rows: int, lookback: int, horizon: int, repeats: int) -> dict:
    loaded = load_checkpoints()
    generator = Generator(loaded.model.eval(), loaded.tokenizer.eval())
    xs = windows(rows, lookback)
    stamp = np.array(STAMP, dtype=np.float32)  # (5,)
    batch = assemble(
        xs, [np.tile(stamp, (lookback, 1))] * rows, [np.tile(stamp, (horizon, 1))] * rows, 1,
        row_keys(1234, list(range(rows)), 1),
    )
    cfg = GenerationConfig(horizon=horizon, max_context=loaded.max_context)

    def one() -> tuple[list[float], float]:
        job = generator.start(batch, cfg)
        steps = []
        cpu0 = time.process_time()
        while not job.done:
            t0 = time.perf_counter()
            job.step()
            steps.append(time.perf_counter() - t0)
        return steps, time.process_time() - cpu0

    one()  # first call set-up
    runs = [one() for _ in range(repeats)]
    ms = lambda xs: round(statistics.median(xs) * 1e3, 2)  # noqa: E731
    return {
        "rows": rows, "lookback": lookback, "horizon": horizon, "repeats": repeats,
        "threads": torch.get_num_threads(),
        "first_step_ms": ms([s[0] for s, _ in runs]),
        "decode_step_ms": ms([statistics.median(s[1:-1]) for s, _ in runs if len(s) > 2] or [0.0]),
        "last_step_ms": ms([s[-1] for s, _ in runs]),
        "forecast_ms": ms([sum(s) for s, _ in runs]),
        "cpu_ms": ms([c for _, c in runs]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5, help="series in the forecast (one path each)")
    p.add_argument("--lookback", type=int, default=200)
    p.add_argument("--horizon", type=int, default=24)
    p.add_argument("--threads", type=int, default=1, help="torch threads (a step loop has one)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    fig = measure(args.rows, args.lookback, args.horizon, args.repeats)
    if args.json:
        print(json.dumps(fig))
        return
    print(
        f"{fig['rows']} series, lookback {fig['lookback']}, horizon {fig['horizon']}, "
        f"{fig['threads']} thread(s), median of {fig['repeats']}: first step "
        f"{fig['first_step_ms']} ms, decode step {fig['decode_step_ms']} ms, last step "
        f"{fig['last_step_ms']} ms, forecast {fig['forecast_ms']} ms, CPU {fig['cpu_ms']} ms"
    )


if __name__ == "__main__":
    main()
