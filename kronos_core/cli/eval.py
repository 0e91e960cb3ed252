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

    add_window_arguments(parser, several_horizons=True)
    add_predictor_arguments(parser, several_models=True)
    parser.add_argument("--calibration", type=Path, action="append",
                        help="calibration JSON (kronos calibrate): the model it was fitted for is "
                             "scored raw and calibrated; repeat it for several models")
    parser.add_argument(
        "--all-features", action="store_true", help="also score open/high/low/volume/amount"
    )
    parser.add_argument("--out", type=Path,
                        help="write the JSON report here (and its tables beside it, as .md)")
    parser.add_argument(
        "--plot", type=Path, metavar="DIR", help="write PNGs (fan charts, coverage, PIT) here"
    )
    parser.add_argument(
        "--plot-series", nargs="+", help="series for fan charts (default: the first)"
    )
    g = parser.add_argument_group(
        "cross-section (--cross-section: rank the universe on rebalance dates instead of "
        "scoring windows; docs/evaluation.md)")
    g.add_argument("--cross-section", action="store_true",
                   help="RankIC, IC, quantile returns, turnover and a top-k portfolio of the "
                        "model's expected return against 5-day reversal, 20-day momentum and low "
                        "volatility on every rebalance date")
    g.add_argument("--every", type=int, default=10,
                   help="rows of the universe's calendar between rebalance dates (default 10)")
    g.add_argument("--factor-quantiles", type=int, default=10,
                   help="signal quantiles per date (default 10: deciles)")
    g.add_argument("--top-k", type=int, default=None,
                   help="symbols the long-only portfolio holds (default: the top quantile)")
    g.add_argument("--cost-bps", type=float, default=10.0,
                   help="portfolio costs per unit of turnover, basis points (default 10)")
    g.add_argument("--min-names", type=int, default=20,
                   help="fewest symbols a date must rank to count (default 20)")
    parser.add_argument(
        "--monitor-out", type=Path, default=None,
        help="resource report (JSON) of the run; default: <--out stem>.monitor.json, "
        "else eval-monitor.json",
    )


def requires(args) -> list:
    """The GARCH(1,1) baseline of every report needs arch, ``--plot`` matplotlib (both the
    ``eval`` extra)."""
    from kronos_core.cli.requirements import needs

    plots = needs(["matplotlib"], "--plot") if args.plot else []
    if getattr(args, "cross_section", False):
        return needs(["empyrical"], "--cross-section's portfolio statistics") + plots
    return needs(["arch"], "the GARCH(1,1) baseline") + plots


def write_plots(out: Path, report: dict, wf, calibrated=None, series_names=None) -> list[Path]:
    """Coverage and PIT plots and fan charts of the first model (through its calibration when
    ``calibrated``, a ``CalibratedPaths``, is given)."""
    from kronos_core.eval import plots
    from kronos_core.eval.evaluate import CLOSE

    out.mkdir(parents=True, exist_ok=True)
    name = report["model"].get("name", "model")
    files = [
        # point baselines have zero-width intervals: only the probabilistic forecasters
        plots.coverage_plot(
            out / "coverage.png",
            {name: report["metrics"], "hist_vol": report["baselines"]["hist_vol"]},
        ),
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
            q = (calibrated.quantile_fn(np.array([i]))(lv) if calibrated is not None
                 else np.quantile(samples, lv, axis=1))  # (2, 1, H)
            bands[c] = (q[0, 0], q[1, 0])
        s = wf.series[k]
        o = int(w.origins[i])
        ctx = slice(max(0, o - min(120, len(w.context_ts[i]))), o)
        files.append(plots.fan_chart(
            out / f"fan_{sname}.png", f"{sname}: forecast from {s.timestamps[o - 1]} ({name})",
            s.timestamps[ctx], s.values[ctx, CLOSE], w.future_ts[i], w.truth[i, :, CLOSE],
            samples[0].mean(axis=0), bands))
    return files


def check_packages(args) -> None:
    """Every optional package the run needs, before any work: ``arch`` (GARCH baseline, every
    report) and, with ``--plot``, matplotlib. Raises ``ImportError`` naming what to install."""
    from kronos_core.eval.garch import require_arch

    require_arch()
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise ImportError("--plot needs matplotlib: "
                              "pip install 'kronos-portfolio[eval]'") from exc


def run_cross_section(args) -> int:
    """``kronos eval --cross-section``: the cross-section report of the first model."""
    import time

    from kronos_core.cli.model_runs import move_correction_used
    from kronos_core.eval import cross_section_report as csr
    from kronos_core.eval.data import DataError
    from kronos_core.eval.runner import sampling_for
    from kronos_core.eval.sources import load_source
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    t0 = time.perf_counter()
    try:
        if args.factor_quantiles < 2:
            raise ValueError(f"--factor-quantiles must be >= 2, got {args.factor_quantiles}")
        source = load_source(args)
        model = (args.model or [None])[0]
        predictor = load_predictor(predictor_config_from_args(args, model=model))
        sampling = sampling_for(args, predictor)
        print(f"kronos eval: cross-section, {len(source.series)} series, sampling "
              f"{sampling.describe()}", file=sys.stderr)
        section, extras = csr.cross_section(args, predictor, source, sampling)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"kronos eval: {exc}", file=sys.stderr)
        return 2
    section["seconds"] = round(time.perf_counter() - t0, 1)
    report = {"model": {**predictor.identity.as_dict(), "max_context": predictor.max_context},
              "sampling": sampling.as_dict(), "seed": args.seed,
              "move_correction": move_correction_used(args, predictor, max(args.horizon)),
              "selection": source.selection or {"data": [str(d) for d in args.data or []]},
              "cross_section": section}
    text = csr.markdown(section)
    print(text)
    print(f"\ncross-section: {section['windows']} windows forecast in "
          f"{section['forecast_seconds']:.0f} s, {section['seconds']:.0f} s in all")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=float))
        md = args.out.with_suffix(".md")
        md.write_text(text + "\n")
        data = csr.write_factor_data(args.out.with_suffix(".factor_data.parquet"), extras)
        print(f"wrote {args.out}, {md} and {data} (alphalens layout)")
    if args.plot:
        for f in csr.write_plots(args.plot, section, extras):
            print(f"wrote {f}")
    return 0


def run(args) -> int:
    if getattr(args, "cross_section", False):
        return run_cross_section(args)
    from kronos_core.calibration.conformal import CalibrationError
    from kronos_core.cli.model_runs import evaluate_models
    from kronos_core.eval.data import DataError
    from kronos_core.model import CheckpointError

    try:
        check_packages(args)
    except ImportError as exc:
        print(f"kronos eval: {exc}", file=sys.stderr)
        return 2
    try:
        result = evaluate_models(args)
    except (DataError, CalibrationError, CheckpointError, ValueError) as exc:
        print(f"kronos eval: {exc}", file=sys.stderr)
        return 2
    report, text = result.report, result.text
    monitor_path, resources = result.monitor_path, result.resources
    print(text)
    for m in report["models"]:
        t = m["throughput"]
        print(f"\n{m['name']}: {t['windows']} windows in {t['seconds']:.1f}s: "
              f"{t['windows_per_second']:.2f} windows/s ({t['sample_count']} paths, horizon "
              f"{max(args.horizon)}, lookback {args.lookback}, {t['device']})")
        if m.get("sampling"):
            s = m["sampling"]
            print(f"sampling settings used: {s['sample_count']} paths, temperature "
                  f"{s['temperature']:g}, top-p {s['top_p']:g}, point forecast the {s['point']} "
                  f"({s['source']})")
        if m.get("move_correction"):
            mc = m["move_correction"]
            print("move correction " + ("applied" if mc["applied"] else
                                        "NOT applied (--no-move-correction)")
                  + ": lambda " + ", ".join(f"{v:.3f}" for v in mc["lambda"]) + "; kappa "
                  + ", ".join(f"{v:.3f}" for v in mc["kappa"]) + f" per step ({mc['source']})")
        if m["random_weights"]:
            print(f"note: {m['name']} has RANDOM weights; its forecasts are not meaningful")
    print(f"resource report written to {monitor_path} (peak RSS "
          f"{resources['summary']['rss_bytes_peak'] / 2**20:.0f} MiB)")
    for warning in resources["warnings"]:
        print(f"  warning: {warning}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=float))
        md = args.out.with_suffix(".md")
        md.write_text(text + "\n")
        print(f"wrote {args.out} and {md}")
    if args.plot:
        for f in write_plots(args.plot, report, result.first_run(), result.first_calibration(),
                             args.plot_series):
            print(f"wrote {f}")
    return 0
