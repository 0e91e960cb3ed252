"""``kronos tune-sampling``: choose a model's sampling settings on validation windows.

Every (temperature, top-p) of a small grid forecasts the same windows; each is scored with the
mean and with the median of its paths as the point forecast, against the last value (absolute
error) and the historical-volatility band (CRPS), at each horizon asked. The settings with the
lowest **objective** win: the mean over horizons of the two ratios, model / last value (MASE) and
model / band (CRPS), both pooled over the windows on the MASE scale (the model card's protocol).
The model's CRPS is the fair ensemble estimate (its paths are random draws), the band's the plug-in
one of its stratified quantile grid, as ``kronos eval`` scores them.

The windows end before each series' evaluation period: with ``--corpus``, the last ``--windows``
windows of each selected series whose truth ends before its ``eval_from`` (as ``kronos
calibrate --corpus`` picks them), never an evaluation row; with ``--data``, windows whose truth
ends before ``--end``, which is then required. ``--write DIR`` stores the choice in the model
folder's ``kronos.json`` (``sampling``, with the grid's table), where ``kronos forecast``,
``kronos eval`` and the service read it when a request names no settings.

Example::

    kronos tune-sampling --corpus CORPUS_DIR --model MODEL_DIR --max-series-per-group 8
        --windows 4 --lookback 251 --horizon 1 5 --write MODEL_DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_TEMPERATURES = (0.7, 0.85, 1.0)
DEFAULT_TOP_PS = (0.9, 1.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.eval.runner import add_window_arguments, floats
    from kronos_core.loading import add_predictor_arguments

    add_window_arguments(parser, several_horizons=True)
    add_predictor_arguments(parser)
    parser.add_argument("--temperatures", type=floats, default=DEFAULT_TEMPERATURES,
                        help="temperatures tried (default 0.7,0.85,1.0)")
    parser.add_argument("--top-ps", type=floats, default=DEFAULT_TOP_PS,
                        help="top-p values tried (default 0.9,1.0)")
    parser.add_argument("--write", type=Path, metavar="MODEL_DIR",
                        help="write the chosen settings into MODEL_DIR/kronos.json ('sampling')")
    parser.add_argument("--json", type=Path, help="also write the whole table as JSON here")


@dataclass(frozen=True)
class Trial:
    """One grid point's pooled ratios: {horizon: (MASE / last value, CRPS / band)}."""

    temperature: float
    top_p: float
    point: str
    ratios: dict[int, tuple[float, float]]

    @property
    def objective(self) -> float:
        return float(np.mean([v for pair in self.ratios.values() for v in pair]))

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "point": self.point,
                "objective": round(self.objective, 5),
                **{f"h{h}": {"mase_over_last_value": round(a, 5),
                             "crps_over_band": round(b, 5)} for h, (a, b) in self.ratios.items()}}


def pooled_ratios(paths: np.ndarray, truth: np.ndarray, history: np.ndarray,
                  horizons: list[int], point: str) -> dict[int, tuple[float, float]]:
    """{h: (MASE model / MASE last value, sCRPS model / sCRPS band)} over the first h steps of
    every window. paths (N, S, H), truth (N, H), history (N, L): the close."""
    from kronos_core.eval import baselines as bl
    from kronos_core.eval import metrics as m

    scale = m.mase_scale(history)  # (N,)
    band = bl.hist_vol(history, paths.shape[2])  # (N, S', H)
    last = bl.last_value(history, paths.shape[2])[:, 0]  # (N, H)
    model_point = m.point_forecast(paths, point)  # (N, H)
    out = {}
    for h in horizons:
        ok = scale > 0
        ae = m.scaled_errors(model_point[ok, :h], truth[ok, :h], scale[ok])
        ae_last = m.scaled_errors(last[ok, :h], truth[ok, :h], scale[ok])
        crps = m.crps_elements(paths[ok, :, :h], truth[ok, :h]) / scale[ok, None]
        crps_band = m.crps_elements(band[ok, :, :h], truth[ok, :h], m.PLUG_IN) / scale[ok, None]
        out[h] = (float(ae.mean() / ae_last.mean()), float(crps.mean() / crps_band.mean()))
    return out


def validation_windows(args, predictor, source):
    """The windows to tune on (module docstring) and their series' walk-forward runs."""
    from kronos_core.eval.windows import build_windows

    horizon = max(args.horizon)
    if source.corpus is not None:
        ends = [i.eval_from for i in source.info]
        if any(e is None for e in ends):
            raise ValueError("a corpus series has no eval_from; cannot place validation windows")
    elif args.end is None:
        raise ValueError("--data needs --end: the windows to tune on must end before the data you "
                         "evaluate on")
    else:
        ends = [args.end] * len(source.series)
    return build_windows(source.series, args.lookback, horizon, args.windows, args.step,
                         start=args.start, end=ends, last_fraction=args.last_fraction)


def run_grid(args, predictor, w) -> list[Trial]:
    """Forecast ``w`` at every grid point; both point forecasts scored from the same paths."""
    from kronos_core.eval.evaluate import CLOSE
    from kronos_core.eval.runner import Sampling, forecast_paths

    horizon, horizons = max(args.horizon), sorted(set(args.horizon))
    truth = w.truth[..., CLOSE].astype(np.float64)  # (N, H)
    history = w.context[..., CLOSE].astype(np.float64)  # (N, L)
    paths_count = args.sample_count or predictor.sampling.sample_count
    if paths_count < 2:
        paths_count = 32
    trials = []
    for t, p in itertools.product(args.temperatures, args.top_ps):
        sampling = Sampling(paths_count, float(t), float(p), "mean", "grid")
        paths, secs = forecast_paths(args, predictor, w, horizon, sampling)
        close = paths[..., CLOSE].astype(np.float64)  # (N, S, H)
        for point in ("mean", "median"):
            trial = Trial(float(t), float(p), point,
                          pooled_ratios(close, truth, history, horizons, point))
            trials.append(trial)
            print(f"T {t:g}  top-p {p:g}  {point:<6}  objective {trial.objective:.4f}  "
                  + "  ".join(f"h{h}: MASE/last {a:.4f} CRPS/band {b:.4f}"
                              for h, (a, b) in trial.ratios.items())
                  + f"   ({secs:.0f} s)", file=sys.stderr)
    return trials


def write_choice(model_dir: Path, best: Trial, trials: list[Trial], sample_count: int,
                 about: dict) -> Path:
    """Store ``best`` as the ``sampling`` block of ``model_dir/kronos.json`` (other keys kept)."""
    from kronos_core.base.atomic import write_bytes_atomically

    file = model_dir / "kronos.json"
    meta = json.loads(file.read_text()) if file.is_file() else {}
    meta["sampling"] = {
        "temperature": best.temperature, "top_p": best.top_p, "sample_count": sample_count,
        "point": best.point,
        "chosen_by": {**about, "objective": "mean over horizons of MASE / last value and CRPS / "
                      "historical-volatility band, pooled on the MASE scale; lowest wins",
                      "trials": [t.as_dict() for t in sorted(trials, key=lambda t: t.objective)]},
    }
    write_bytes_atomically(file, (json.dumps(meta, indent=2) + "\n").encode())
    return file


def run(args) -> int:
    from kronos_core.eval.data import DataError
    from kronos_core.eval.sources import load_source
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    try:
        source = load_source(args)
        predictor = load_predictor(predictor_config_from_args(args))
        w = validation_windows(args, predictor, source)
        if len(w) == 0:
            raise ValueError("no validation window fits before the evaluation periods; lower "
                             "--lookback or --windows")
        print(f"kronos tune-sampling: {len(w)} validation windows of {len(source.series)} series "
              f"(each ends before its evaluation period), model {predictor.identity.name}",
              file=sys.stderr)
        trials = run_grid(args, predictor, w)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"kronos tune-sampling: {exc}", file=sys.stderr)
        return 2
    best = min(trials, key=lambda t: t.objective)
    paths_count = args.sample_count or max(predictor.sampling.sample_count, 32)
    print("| temperature | top-p | point | objective | "
          + " | ".join(f"h{h} MASE/last | h{h} CRPS/band" for h in sorted(set(args.horizon)))
          + " |")
    print("|---|---|---|---|" + "---|---|" * len(set(args.horizon)))
    for t in sorted(trials, key=lambda t: t.objective):
        print(f"| {t.temperature:g} | {t.top_p:g} | {t.point} | {t.objective:.4f} | "
              + " | ".join(f"{a:.4f} | {b:.4f}" for a, b in t.ratios.values()) + " |")
    print(f"\nchosen: temperature {best.temperature:g}, top-p {best.top_p:g}, point forecast the "
          f"{best.point}, {paths_count} paths (objective {best.objective:.4f})")
    about = {"windows": len(w), "series": len(source.series), "lookback": args.lookback,
             "horizons": sorted(set(args.horizon)), "seed": args.seed,
             "where": "windows whose truth ends before each series' eval_from"
             if source.corpus is not None else f"windows whose truth ends before {args.end}"}
    if args.json:
        args.json.write_text(json.dumps({"about": about, "best": best.as_dict(),
                                         "trials": [t.as_dict() for t in trials]}, indent=2))
    if args.write:
        file = write_choice(args.write, best, trials, paths_count, about)
        print(f"wrote the sampling settings into {file}")
    return 0
