"""The request-time plan (``kronos_core.plan.roofline.forecast_seconds``) against the engine on
this CPU: where ``CPU_ENGINE_FACTORS`` come from (issue 53, the deadline check).

Runs the bundled default model in-process on one torch thread over the sample store's windows,
workload by workload (lookback, horizon, sample paths, series, series per engine call), and
prints its CPU time beside the roofline's estimate without factors (``probe_cpu`` of the same
thread, one lane), split into its tokenize + prefill part, its decode part and the windows
recomputed past the context. Then it fits one factor per part (least squares on the relative
error) and prints each workload's estimate with
the factors the code uses against its measured time. CPU time of one thread is what other jobs
on a shared machine inflate least; the service's wall time on a loaded machine is longer.

    .venv/bin/python scripts/plan-request-time.py [--json out.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# (lookback, horizon, paths, series, series per call)
WORKLOADS = [
    (251, 5, 32, 24, 8),
    (251, 5, 8, 24, 8),
    (251, 5, 1, 48, 8),
    (244, 12, 32, 16, 8),
    (232, 24, 4, 16, 8),
    (128, 16, 16, 16, 16),
    (64, 5, 32, 32, 32),
    (251, 5, 32, 8, 2),
    # past the 256-candle context: the steps that slide recompute each row's window (exact)
    (251, 24, 4, 8, 8),
    (400, 8, 4, 8, 8),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="the first two workloads only")
    args = p.parse_args()

    import torch

    from kronos_core.base.options import ForecastOptions
    from kronos_core.data.portfolio_windows import sample_store_windows
    from kronos_core.loading import PredictorConfig, load_predictor
    from kronos_core.plan import roofline as R

    torch.set_num_threads(1)
    clock = time.thread_time
    predictor = load_predictor(PredictorConfig(device="cpu"))
    cfg, tok, ctx = predictor.model.config, predictor.tokenizer.config, predictor.max_context
    device = R.probe_cpu(1.0, clock)
    print(f"probe (one thread, CPU time): {device.fp32_flops / 1e9:.1f} GFLOP/s, "
          f"{device.bandwidth / 1e9:.1f} GB/s, {device.op_overhead_s * 1e6:.2f} us an op")
    rows = []
    for lookback, horizon, paths, series, per_call in WORKLOADS[: 2 if args.quick else None]:
        windows = sample_store_windows(series, lookback, horizon)
        options = ForecastOptions(horizon, sample_count=paths, seed=0).with_defaults(
            predictor.sampling)
        warm = windows.chunk(0, per_call)
        predictor.forecast(warm.values, warm.x_stamps, warm.y_stamps, options)
        c0 = clock()
        for start in range(0, series, per_call):
            part = windows.chunk(start, start + per_call)
            predictor.forecast(part.values, part.x_stamps, part.y_stamps, options)
        measured = clock() - c0
        plan = R.forecast_seconds(cfg, tok, [len(v) for v in windows.values], horizon, paths,
                                  device, 1, ctx, per_call, factors=dict.fromkeys(R.PARTS, 1.0))
        row = {"lookback": lookback, "horizon": horizon, "paths": paths, "series": series,
               "series_per_call": per_call, "measured_cpu_s": measured,
               "roofline_s": plan.seconds, "roofline_parts": plan.parts,
               "ratio": measured / plan.seconds,
               "ms_per_series": 1e3 * measured / series}
        rows.append(row)
        print(f"lookback {lookback:3d} horizon {horizon:2d} paths {paths:2d} series {series:2d} "
              f"({per_call:2d} a call): engine {measured:6.2f} s CPU, roofline {plan.seconds:6.3f}"
              f" s, ratio {row['ratio']:.2f}")
    import numpy as np

    groups = {"prefill": ("tokenize_detokenize", "prefill"), "decode": ("decode",),
              "recompute": ("recompute",)}
    columns = {g: np.array([sum(r["roofline_parts"][k] for k in keys) for r in rows])
               for g, keys in groups.items()}
    times = np.array([r["measured_cpu_s"] for r in rows])
    fitted = [g for g in groups if columns[g].any()]  # --quick: nothing recomputed
    design = np.stack([columns[g] for g in fitted], 1) / times[:, None]
    fit = dict(zip(fitted, np.linalg.lstsq(design, np.ones(len(rows)), rcond=None)[0],
                   strict=True))
    used = R.CPU_ENGINE_FACTORS
    for i, r in enumerate(rows):
        r["estimate_s"] = float(sum(columns[g][i] * used[groups[g][-1]] for g in groups))
        r["estimate_over_measured"] = r["estimate_s"] / r["measured_cpu_s"]
    print("fit: " + ", ".join(f"{g} x {f:.2f}" for g, f in fit.items())
          + f"; with the factors used ({used}) the estimates are "
          f"{min(r['estimate_over_measured'] for r in rows):.2f}-"
          f"{max(r['estimate_over_measured'] for r in rows):.2f} of the measured times")
    if args.json:
        args.json.write_text(json.dumps({
            "device": {"fp32_flops": device.fp32_flops, "bandwidth": device.bandwidth,
                       "op_overhead_s": device.op_overhead_s},
            "fit": {g: float(f) for g, f in fit.items()}, "used": used,
            "workloads": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
