"""What ``kronos eval`` runs: every model (raw and through its calibration) and every baseline on
the same windows, scored pooled, per (hold-out, market, frequency) group and per horizon.

Windows: from files, counted back from each series' end (``--windows``, ``--step``); from a corpus,
``--windows`` per series spread over its evaluation period (origins at or after ``eval_from``).
They are forecast once per model at the longest ``--horizon``. Baselines: last value, drift,
seasonal naive, the 20-step historical-volatility band and GARCH(1,1)-t (``kronos_core.eval.garch``,
fitted per series on the rows before the first scored one). Every model's tokenizer round trip
on the windows' contexts (``kronos_core.eval.fidelity_report``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kronos_core.eval.calibrated import CalibratedPaths
from kronos_core.eval.runner import Sampling
from kronos_core.eval.sources import GIVEN, EvalSource, load_source
from kronos_core.eval.windows import Windows, build_windows

if TYPE_CHECKING:
    from kronos_core.predictor import KronosPredictor

log = logging.getLogger(__name__)


@dataclass
class ModelRun:
    """One model's forecasts of the windows, and its calibrated version when one applies."""

    name: str
    predictor: KronosPredictor
    paths: np.ndarray  # (N, S, H, 6)
    seconds: float
    calibrated: CalibratedPaths | None = None
    calibration_file: Path | None = None
    sampling: Sampling | None = None  # the settings its paths were drawn with

    @property
    def calibrated_name(self) -> str:
        method = self.calibrated.method if self.calibrated is not None else "?"
        return f"{self.name} + {method} calibration"


@dataclass
class EvalResult:
    report: dict
    text: str  # the Markdown tables
    monitor_path: Path
    resources: dict
    source: EvalSource
    windows: Windows
    runs: list[ModelRun]

    def first_run(self):
        from kronos_core.eval.runner import WalkForward

        first = self.runs[0]
        return WalkForward(self.source.series, self.windows, first.paths, first.seconds)

    def first_calibration(self) -> CalibratedPaths | None:
        return self.runs[0].calibrated


def eval_windows(args, source: EvalSource, horizon: int) -> Windows:
    """The windows every forecaster is scored on (module docstring)."""
    if all(t is None for t in source.eval_from):  # files without --eval-from
        return build_windows(source.series, args.lookback, horizon, args.windows, args.step,
                             start=args.start, end=args.end, last_fraction=args.last_fraction)
    asked = pd.Timestamp(args.start) if args.start else None
    starts = [max(t, asked) if asked is not None else t for t in source.eval_from]
    return build_windows(source.series, args.lookback, horizon, args.windows, args.step,
                         start=starts, end=args.end, last_fraction=args.last_fraction,
                         spread=args.step is None)


def garch_fit_ends(source: EvalSource, w: Windows) -> list[int]:
    """Per series, the row the GARCH fit ends before: its ``eval_from`` row (corpus), else its
    first window's origin."""
    ends = []
    for k, s in enumerate(source.series):
        mine = w.origins[w.series_index == k]
        first = int(mine.min()) if len(mine) else len(s)
        t = source.info[k].eval_from
        if t is not None:
            first = min(first, int(s.timestamps.searchsorted(t, "left")))
        ends.append(first)
    return ends


def _names(predictors) -> list[str]:
    names: list[str] = []
    for p in predictors:
        base = getattr(p.identity, "name", None) or "model"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}#{n}"
        names.append(name)
    return names


def _match_calibrations(files, predictors, names) -> dict[int, tuple]:
    """{model index: (Calibration, file)}: each file goes with the model it was fitted for."""
    from kronos_core.calibration.conformal import Calibration, CalibrationError, CalibrationMismatch

    out: dict[int, tuple] = {}
    for f in files or []:
        cal = Calibration.load(f)
        for i, p in enumerate(predictors):
            try:
                cal.check_model(p.identity)
            except CalibrationMismatch:
                continue
            if i in out:
                raise CalibrationError(f"{f}: model {names[i]} already has the calibration "
                                       f"{out[i][1]}")
            out[i] = (cal, Path(f))
            break
        else:
            raise CalibrationError(
                f"{f} was fitted for model {cal.model.get('name')} "
                f"({str(cal.model.get('sha256'))[:12]}), none of the models evaluated "
                f"({', '.join(names)}); fit one with `kronos calibrate`")
    return out


def _forecasters(runs: list[ModelRun], base: dict[str, np.ndarray]) -> list:
    from kronos_core.eval.evaluate import CLOSE, baseline_crps_estimator, baseline_point
    from kronos_core.eval.grouped import Forecaster
    from kronos_core.eval.metrics import point_forecast

    out = []
    for r in runs:
        point = r.sampling.point if r.sampling is not None else "mean"
        close = r.paths[..., CLOSE].astype(np.float64)  # (N, S, H)
        out.append(Forecaster(r.name, close, point_forecast(close, point), is_model=True))
        if r.calibrated is not None:
            cal = r.calibrated.paths[..., CLOSE].astype(np.float64)
            out.append(Forecaster(r.calibrated_name, cal, point_forecast(cal, point), is_model=True,
                                  quantiles=r.calibrated.quantile_fn,
                                  calibration=str(r.calibration_file)))
    for name, s in base.items():
        if name != "seasonal_naive":  # its season differs between groups
            out.append(Forecaster(name, s, baseline_point(name, s),
                                  crps_estimator=baseline_crps_estimator(name)))
    return out


def scoring_section(runs: list[ModelRun]) -> dict:
    """How each forecaster's CRPS was estimated, and from how many paths (the report's
    ``scoring``)."""
    from kronos_core.eval.baselines import HIST_VOL_SAMPLES
    from kronos_core.eval.evaluate import baseline_crps_estimator
    from kronos_core.eval.garch import GARCH_SAMPLES
    from kronos_core.eval.metrics import CRPS_METHOD, FAIR

    forecasters = {}
    for r in runs:
        forecasters[r.name] = {"crps_estimator": FAIR, "paths": int(r.paths.shape[1])}
        if r.calibrated is not None:
            forecasters[r.calibrated_name] = {"crps_estimator": FAIR,
                                              "paths": int(r.paths.shape[1])}
    for name, paths in (("hist_vol", HIST_VOL_SAMPLES), ("garch", GARCH_SAMPLES),
                        ("last_value", 1), ("drift", 1), ("seasonal_naive", 1)):
        forecasters[name] = {"crps_estimator": baseline_crps_estimator(name), "paths": paths}
    return {"crps_estimators": CRPS_METHOD, "forecasters": forecasters,
            "note": "quantiles, coverage and P(up) of a sampled forecaster come from its paths"}


def scoring_note(runs: list[ModelRun]) -> str:
    """One line naming the CRPS estimators of the report."""
    from kronos_core.eval.baselines import HIST_VOL_SAMPLES
    from kronos_core.eval.garch import GARCH_SAMPLES

    paths = sorted({int(r.paths.shape[1]) for r in runs})
    return (f"the fair (unbiased) ensemble estimator for the models ({'/'.join(map(str, paths))} "
            f"paths) and GARCH ({GARCH_SAMPLES} paths); the plug-in one for the band's "
            f"{HIST_VOL_SAMPLES}-level quantile grid and the point forecasts (scoringrules). "
            "Quantiles, coverage and P(up) come from the same paths.")


def move_correction_used(args, predictor, horizon: int) -> dict | None:
    """The model's move correction as its paths got it (``MoveCorrection.report``: applied or
    not, per step), None when the model has none."""
    moves = getattr(predictor, "moves", None)
    if moves is None:
        return None
    return moves.report(horizon, bool(getattr(args, "move_correction", True)))


def evaluate_models(args) -> EvalResult:
    """Load, forecast, score, and render ``kronos eval``'s report (module docstring)."""
    from kronos_core.base.monitor import ResourceMonitor
    from kronos_core.eval import fidelity_report, grouped
    from kronos_core.eval.evaluate import baseline_samples, evaluate, markdown, table
    from kronos_core.eval.garch import GARCH_SAMPLES, garch_samples
    from kronos_core.eval.runner import WalkForward, data_section, forecast_paths, sampling_for
    from kronos_core.loading import load_predictor, predictor_config_from_args

    horizons = sorted(set(args.horizon))
    if horizons[0] < 1:
        raise ValueError(f"--horizon must be >= 1, got {horizons[0]}")
    horizon = horizons[-1]
    source = load_source(args)
    predictors = [load_predictor(predictor_config_from_args(args, model=m))
                  for m in (args.model or [None])]
    names = _names(predictors)
    calibrations = _match_calibrations(args.calibration, predictors, names)
    w = eval_windows(args, source, horizon)
    log.info("%d windows over %d series", len(w), len(source.series))
    runs: list[ModelRun] = []
    with ResourceMonitor(label="kronos eval") as monitor:
        for i, (p, name) in enumerate(zip(predictors, names)):
            sampling = sampling_for(args, p)
            log.info("%s: sampling with %s", name, sampling.describe())
            print(f"kronos eval: {name} samples {sampling.describe()}", file=sys.stderr)
            paths, secs = forecast_paths(args, p, w, horizon, sampling)
            monitor.step(n_samples=len(w))
            run = ModelRun(name, p, paths, secs, sampling=sampling)
            if i in calibrations:
                cal, file = calibrations[i]
                run.calibrated = CalibratedPaths(cal, paths, w.series_index, source.series,
                                                 args.lookback, p.identity, str(file))
                run.calibration_file = file
            runs.append(run)
    from kronos_core.eval.evaluate import CLOSE

    closes = [s.values[:, CLOSE] for s in source.series]
    garch, fits = garch_samples(closes, garch_fit_ends(source, w), w.series_index, w.origins,
                                horizon, GARCH_SAMPLES, args.seed)
    wf = WalkForward(source.series, w, runs[0].paths, runs[0].seconds)
    seasons = wf.seasons()
    first = runs[0]
    sections = evaluate(w, first.paths, seasons, args.quantiles, args.coverage, first.calibrated,
                        args.all_features, extra_baselines={"garch": garch},
                        point=first.sampling.point if first.sampling is not None else "mean")
    base = baseline_samples(w, seasons, horizon)
    base["garch"] = garch
    groups = grouped.grouped_report(w, source.info, _forecasters(runs, base), horizons,
                                    args.quantiles, args.coverage)
    pooled = {h: rows[-1] for h, rows in groups["horizons"].items()}
    models = []
    for r in runs:
        p = r.predictor
        models.append({
            "name": r.name, **p.identity.as_dict(), "max_context": p.max_context,
            "sliding": p.sliding,
            "calibration": str(r.calibration_file) if r.calibration_file else None,
            "calibration_method": r.calibrated.method if r.calibrated is not None else None,
            "metrics": {h: pooled[h]["forecasters"][r.name] for h in pooled},
            "calibrated": ({h: pooled[h]["forecasters"][r.calibrated_name] for h in pooled}
                           if r.calibrated is not None else None),
            "throughput": {"windows": len(w), "seconds": round(r.seconds, 3),
                           "windows_per_second": (round(len(w) / r.seconds, 3) if r.seconds > 0
                                                  else None),
                           "sample_count": (r.sampling.sample_count if r.sampling is not None
                                            else args.sample_count),
                           "device": str(p.device)},
            "sampling": r.sampling.as_dict() if r.sampling is not None else None,
            "move_correction": move_correction_used(args, p, horizon),
        })
    data = data_section(args, wf, horizon)
    if first.sampling is not None:
        data["sample_count"] = first.sampling.sample_count
        data["sampling"] = first.sampling.as_dict()
    data.update({"horizons": horizons, "source": "corpus" if source.corpus else "files",
                 **({"selection": source.selection} if source.corpus else {})})
    for entry, info in zip(data["series"], source.info):
        entry.update({"market": info.market, "frequency": info.frequency, "holdout": info.holdout,
                      "eval_from": str(info.eval_from) if info.eval_from is not None else None})
    report = {
        "model": {**first.predictor.identity.as_dict(), "name": first.name,
                  "max_context": first.predictor.max_context, "sliding": first.predictor.sliding,
                  "calibration": str(first.calibration_file) if first.calibration_file else None},
        "models": models,
        "data": data,
        **sections,
        "garch": {"samples": GARCH_SAMPLES,
                  "model": "GARCH(1,1), constant mean, Student-t, returns in %",
                  "fits": {source.series[k].name: f.as_dict() for k, f in fits.items()},
                  "fallback": {source.series[k].name: f.fallback
                               for k, f in fits.items() if f.fallback}},
        "groups": groups,
        "scoring": scoring_section(runs),
        "throughput": models[0]["throughput"],
    }
    default_monitor = (args.out.with_name(args.out.stem + ".monitor.json") if args.out
                       else Path("eval-monitor.json"))
    monitor_path = args.monitor_out or default_monitor
    resources = monitor.report(monitor_path)
    report["throughput"]["resources"] = str(monitor_path)
    parts = []
    if all(i.holdout == GIVEN for i in source.info):
        extra = {}
        for r in runs[1:]:
            extra[r.name] = pooled[str(horizon)]["forecasters"][r.name]
            if r.calibrated is not None:
                extra[r.calibrated_name] = pooled[str(horizon)]["forecasters"][r.calibrated_name]
        parts.append(markdown(report, args.coverage, extra_rows=extra))
    else:
        for h, row in pooled.items():
            parts += [f"### All windows ({row['windows']}), horizon {h}", "",
                      table(row["forecasters"], args.coverage), ""]
    parts += ["", grouped.markdown(groups)]
    vol = grouped.volatility_markdown(groups)
    if vol:
        parts += ["", "### Volatility skill (the last step of each horizon; "
                  "kronos_core/eval/volatility.py)", "", vol]
    parts += ["", f"CRPS: {scoring_note(runs)}"]
    cmp = grouped.comparison_markdown(groups)
    if cmp:
        parts += ["", "### Models compared (paired test on all windows)", "", cmp]
    report["tokenizer_fidelity"] = fidelity_report.section(runs, w, source.info)
    goal = report["tokenizer_fidelity"]["goal_close_error_over_move"]
    parts += ["", "### Tokenizer round trip (the windows' contexts; goal for the close: "
              f"error / move <= {goal:g})", "",
              fidelity_report.markdown(report["tokenizer_fidelity"])]
    report["summary"] = {"models": [m["name"] for m in models],
                         "calibrated": {m["name"]: m["calibration"] for m in models}}
    return EvalResult(report, "\n".join(parts), monitor_path, resources, source, w, runs)
