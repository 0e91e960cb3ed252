"""``kronos eval``: walk-forward evaluation of a model against baselines.

Example::

    kronos eval --data kronos_core/data/real/goog_daily.csv --lookback 256 --horizon 10 \\
        --windows 50 --sample-count 32 --out report.json --plot plots/
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.eval.runner import add_window_arguments
    from kronos_core.loading import add_predictor_arguments

    add_window_arguments(parser)
    add_predictor_arguments(parser)
    parser.add_argument("--calibration", type=Path, help="calibration JSON (kronos calibrate) for the quantiles")
    parser.add_argument("--all-features", action="store_true", help="also score open/high/low/volume/amount")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write PNGs (fan charts, coverage, PIT) here")
    parser.add_argument("--plot-series", nargs="+", help="series for fan charts (default: the first)")
    parser.add_argument("--monitor-out", type=Path, default=None,
                        help="resource report (JSON) of the run; default: <--out stem>.monitor.json, "
                             "else eval-monitor.json")


def requires(args) -> list:
    """``--plot`` draws with matplotlib (the ``eval`` extra)."""
    from kronos_core.cli.requirements import needs

    return needs(["matplotlib"], "--plot") if args.plot else []


def write_plots(out: Path, report: dict, wf, calibration=None, series_names=None) -> list[Path]:
    from kronos_core.eval import plots
    from kronos_core.eval.evaluate import CLOSE

    out.mkdir(parents=True, exist_ok=True)
    name = report["model"].get("name", "model")
    files = [
        # point baselines have zero-width intervals: only the probabilistic forecasters
        plots.coverage_plot(out / "coverage.png", {name: report["metrics"], "hist_vol": report["baselines"]["hist_vol"]}),
        plots.pit_plot(out / "pit.png", report["metrics"]["pit"], f"PIT histogram, {name}"),
    ]
    w, levels = wf.windows, [float(c) for c in report["data"]["coverage_levels"]]
    for sname in series_names or [wf.series[0].name]:
        if sname not in w.names:
            log.warning("--plot-series %s: no such series (have %s)", sname, w.names)
            continue
        k = w.names.index(sname)
        mine = np.flatnonzero(w.series_index == k)
        if not len(mine):
            continue
        i = mine[-1]  # the latest window
        samples = wf.paths[i:i + 1, :, :, CLOSE].astype(np.float64)  # (1, S, H)
        bands = {}
        for c in levels:
            lv = [(1 - c) / 2, (1 + c) / 2]
            q = calibration.quantiles(samples, lv) if calibration else np.quantile(samples, lv, axis=1)
            bands[c] = (q[0, 0], q[1, 0])
        s = wf.series[k]
        o = int(w.origins[i])
        ctx = slice(max(0, o - min(120, len(w.context_ts[i]))), o)
        files.append(plots.fan_chart(
            out / f"fan_{sname}.png", f"{sname}: forecast from {s.timestamps[o - 1]} ({name})",
            s.timestamps[ctx], s.values[ctx, CLOSE], w.future_ts[i], w.truth[i, :, CLOSE],
            samples[0].mean(axis=0), bands))
    return files


def calibration_for(cal, series, horizon: int, lookback: int):
    """The calibration (or the member of a file fitted per group) that applies to every one of
    ``series``; raises ``CalibrationError`` naming the series and why it does not apply."""
    from kronos_core.eval.calibration import CalibrationError, series_frequency

    chosen = {}
    for s in series:
        frequency = series_frequency(s.timestamps)
        why = cal.covers(horizon, (), lookback, frequency, s.name)
        if why:
            raise CalibrationError(f"the calibration does not apply to {s.name}: {why}")
        member = cal.select(frequency, s.name)
        chosen[id(member)] = member
    if len(chosen) > 1:
        raise CalibrationError(f"the series fall in different groups of this calibration ({cal.group_by}); "
                               "evaluate each group on its own")
    return next(iter(chosen.values()))


def run(args) -> int:
    from kronos_core.eval.calibration import Calibration, CalibrationError
    from kronos_core.eval.data import DataError
    from kronos_core.eval.evaluate import evaluate, markdown
    from kronos_core.eval.runner import data_section, load_data, walk_forward
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError
    from kronos_core.monitor import ResourceMonitor

    try:
        series = load_data(args)
        calibration = Calibration.load(args.calibration) if args.calibration else None
        predictor = load_predictor(predictor_config_from_args(args))
        if calibration is not None:
            calibration.check_model(predictor.identity)
            calibration = calibration_for(calibration, series, args.horizon, args.lookback)
        with ResourceMonitor(label="kronos eval") as monitor:
            wf = walk_forward(args, predictor, series, start=args.start, end=args.end)
            monitor.step(n_samples=len(wf.windows))
    except (DataError, CalibrationError, CheckpointError, ValueError) as exc:
        print(f"kronos eval: {exc}", file=sys.stderr)
        return 2
    sections = evaluate(wf.windows, wf.paths, wf.seasons(), args.quantiles, args.coverage, calibration,
                        args.all_features)
    report = {
        "model": {**predictor.identity.as_dict(), "max_context": predictor.max_context,
                  "sliding": predictor.sliding, "calibration": str(args.calibration) if calibration else None},
        "data": data_section(args, wf),
        **sections,
        "throughput": {"windows": len(wf.windows), "seconds": round(wf.seconds, 3),
                       "windows_per_second": round(wf.windows_per_second, 3),
                       "sample_count": args.sample_count, "device": str(predictor.device)},
    }
    monitor_path = args.monitor_out or (args.out.with_name(args.out.stem + ".monitor.json") if args.out
                                        else Path("eval-monitor.json"))
    resources = monitor.report(monitor_path)
    report["throughput"]["resources"] = str(monitor_path)
    print(markdown(report, args.coverage))
    print(f"\n{len(wf.windows)} windows in {wf.seconds:.1f}s: {wf.windows_per_second:.2f} windows/s "
          f"({args.sample_count} paths, horizon {args.horizon}, lookback {args.lookback}, {predictor.device})")
    print(f"resource report written to {monitor_path} (peak RSS "
          f"{resources['summary']['rss_bytes_peak'] / 2**20:.0f} MiB)")
    for warning in resources["warnings"]:
        print(f"  warning: {warning}")
    if predictor.identity.random_weights:
        print(f"note: {predictor.identity.name} has RANDOM weights; its forecasts are not meaningful")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=float))
        print(f"wrote {args.out}")
    if args.plot:
        for f in write_plots(args.plot, report, wf, calibration, args.plot_series):
            print(f"wrote {f}")
    return 0
