"""The backtest's forecasts one rebalance date per engine call (before issue 44) against all
dates' windows sharing engine calls (now), on the same universe, model and seed: seconds of
each, forecasts a second, and whether the scores are the same.

    python scripts/bench-backtest-batching.py [--rebalances 924] [--sample-count 16] \\
        [--lookback 128] [--horizon 5] [--model DIR]

Two daily series of the bundled real data (GOOG, S&P 500), rebalanced every row over the last
``--rebalances`` common rows. Timings on a shared machine are noisy; both are measured in the
same run, the per-date one first. Exits 1 when the scores differ (beyond float rounding: 1e-4
relative, 1e-6 absolute) or the batched run is slower.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from kronos_core.eval.data import load_series
from kronos_core.eval.portfolio import Universe, run_backtest
from kronos_core.loading import PredictorConfig, load_predictor

REAL = Path(__file__).resolve().parents[1] / "kronos_core" / "data" / "real"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rebalances", type=int, default=924)
    ap.add_argument("--sample-count", type=int, default=16)
    ap.add_argument("--lookback", type=int, default=128)
    ap.add_argument("--horizon", type=int, default=5)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled model)")
    args = ap.parse_args()
    uni = Universe.from_series(load_series([REAL / "goog_daily.csv", REAL / "sp500_daily.csv"]))
    start = str(uni.timestamps[len(uni.timestamps) - 1 - args.rebalances])
    predictor = load_predictor(PredictorConfig(model=args.model, device="cpu"))
    runs = {}
    for per_date in (True, False):
        t0 = time.perf_counter()
        res = run_backtest(predictor, uni, args.lookback, args.horizon, 1, 1,
                           sample_count=args.sample_count, start=start, progress=False,
                           per_date=per_date)
        runs[per_date] = (time.perf_counter() - t0, res)
    n = len(runs[True][1].rows) * len(uni.names)
    for per_date, (secs, res) in runs.items():
        label = "one date per call (before)" if per_date else "dates batched (after)"
        print(f"{label:<28} {len(res.rows)} rebalances x {len(uni.names)} series: {secs:7.1f} s, "
              f"{n / secs:6.1f} forecasts/s, sharpe {res.performance['model']['sharpe']:.4f}")
    a = np.array([d["scores"] for d in runs[True][1].decisions])
    b = np.array([d["scores"] for d in runs[False][1].decisions])
    # the same to float rounding: the candle decoder's products change shape with the batch
    same, speedup = bool(np.allclose(a, b, rtol=1e-4, atol=1e-6)), runs[True][0] / runs[False][0]
    print(f"speed-up {speedup:.2f}x; scores the same (to float rounding): {same} "
          f"(largest difference {np.abs(a - b).max():.3g})")
    if not same or speedup < 1.0:
        print("FAILED: " + ("the scores differ" if not same else "batching dates was slower"))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
