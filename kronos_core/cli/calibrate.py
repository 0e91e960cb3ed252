"""``kronos calibrate``: fit conformalized-quantile-regression corrections on walk-forward windows.

Example (fit on the first 70% of each series, show coverage before/after on the rest)::

    kronos calibrate --data kronos_core/data/real/goog_daily.csv --lookback 128 --horizon 5 \\
        --windows 100 --sample-count 32 --holdout 0.3 --out calibration.json

The correction is per horizon step and interval level (see
``kronos_core.eval.calibration``); apply it with ``kronos forecast --calibration``,
``kronos eval --calibration`` or ``KronosPredictor.forecast(..., calibration=...)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.eval.calibration import METHODS
    from kronos_core.eval.runner import add_window_arguments
    from kronos_core.loading import add_predictor_arguments

    add_window_arguments(parser)
    add_predictor_arguments(parser)
    parser.add_argument("--method", default="cqr", choices=METHODS,
                        help="cqr: Romano et al. 2019 on log prices; cqr-r: scores scaled by the interval width")
    parser.add_argument("--holdout", type=float,
                        help="fit on windows before the last FRACTION of each series (from --start / --last-fraction on) and "
                             "report coverage before/after calibration on windows in that last part")
    parser.add_argument("--holdout-windows", type=int, help="held-out windows per series (default: --windows)")
    parser.add_argument("--out", type=Path, default=Path("calibration.json"), help="calibration JSON to write")


def levels_from(args) -> tuple[float, ...]:
    """Central levels to calibrate: --coverage plus those implied by --quantiles."""
    implied = {round(abs(2 * q - 1), 10) for q in args.quantiles if abs(q - 0.5) > 1e-12}
    return tuple(sorted(set(args.coverage) | implied))


def split_times(series, fraction: float) -> list:
    """Per series, the time where its last ``fraction`` of rows begins."""
    return [s.timestamps[int(len(s) * (1 - fraction))] for s in series]


def coverage_rows(name, samples, truth, levels, calibration) -> list[dict]:
    """Coverage of each central level before and after calibration, close feature."""
    from kronos_core.eval.metrics import covered

    rows = []
    for c in levels:
        lv = [(1 - c) / 2, (1 + c) / 2]
        raw = np.quantile(samples, lv, axis=1)
        cal = calibration.quantiles(samples, lv, "close")
        rows.append({"series": name, "level": c, "windows": len(truth),
                     "before": float(covered(raw[0], raw[1], truth).mean()),
                     "after": float(covered(cal[0], cal[1], truth).mean())})
    return rows


def holdout_report(args, predictor, series, calibration) -> list[dict]:
    """Coverage before/after on each series' held-out last part, and over all of them."""
    from kronos_core.eval.evaluate import CLOSE
    from kronos_core.eval.runner import walk_forward

    rows, all_s, all_t = [], [], []
    for s, t in zip(series, split_times(series, args.holdout)):
        wf = walk_forward(args, predictor, [s], start=t, windows=args.holdout_windows or args.windows)
        samples = wf.paths[..., CLOSE].astype(np.float64)  # (N, S, H)
        truth = wf.windows.truth[..., CLOSE].astype(np.float64)  # (N, H)
        rows += coverage_rows(s.name, samples, truth, calibration.levels, calibration)
        all_s.append(samples)
        all_t.append(truth)
    if len(series) > 1:
        rows += coverage_rows("all", np.concatenate(all_s), np.concatenate(all_t), calibration.levels, calibration)
    return rows


def run(args) -> int:
    from kronos_core.eval.calibration import Calibration, CalibrationError
    from kronos_core.eval.data import DataError
    from kronos_core.eval.runner import load_data, walk_forward
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    if args.holdout is not None and not 0 < args.holdout < 1:
        print("kronos calibrate: --holdout must be a fraction in (0, 1)", file=sys.stderr)
        return 2
    try:
        series = load_data(args)
        predictor = load_predictor(predictor_config_from_args(args))
        if args.holdout is not None:  # calibration windows end where each series' held-out part begins
            wfs = [walk_forward(args, predictor, [s], start=args.start, end=t)
                   for s, t in zip(series, split_times(series, args.holdout))]
            paths = np.concatenate([w.paths for w in wfs])
            truth = np.concatenate([w.windows.truth for w in wfs])
            n_windows, seconds = len(truth), sum(w.seconds for w in wfs)
        else:
            wf = walk_forward(args, predictor, series, start=args.start, end=args.end)
            paths, truth, n_windows, seconds = wf.paths, wf.windows.truth, len(wf.windows), wf.seconds
        info = {"windows": n_windows, "lookback": args.lookback, "sample_count": args.sample_count,
                "seed": args.seed, "step": args.step or args.horizon, "holdout": args.holdout,
                "series": [s.name for s in series], "start": args.start, "end": args.end}
        cal = Calibration.fit(paths, truth, levels_from(args), predictor.identity.as_dict(), args.method,
                              info=info)
    except (DataError, CalibrationError, CheckpointError, ValueError) as exc:
        print(f"kronos calibrate: {exc}", file=sys.stderr)
        return 2
    cal.save(args.out)
    print(f"fitted {cal.method} on {n_windows} windows ({n_windows / seconds:.2f} windows/s) "
          f"for model {predictor.identity.name}; wrote {args.out}")
    if args.holdout is not None:
        rows = holdout_report(args, predictor, series, cal)
        print("\n| series | level | held-out windows | coverage before | coverage after |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['series']} | {r['level']:g} | {r['windows']} | {100 * r['before']:.1f}% "
                  f"| {100 * r['after']:.1f}% |")
    return 0
