"""``kronos tune-moves``: fit a model's move correction on training-period windows.

The model forecasts the windows with its own sampling settings (those of its ``kronos.json``
``sampling`` unless flags name others), its paths as sampled: no move correction it may already
have, no price limits. Per horizon step, ``lambda`` (how far the path centre should move of the
model's mean move) and ``kappa`` (the spread scale at which the mean forecast |return| is the
realised one) are fitted on those paths against the truth (``kronos_core.eval.moves``); the
predictor applies them as ``kronos_core.base.moves`` says.

The windows are ``kronos tune-sampling``'s: with ``--corpus``, the last ``--windows`` windows of
each selected series whose truth ends before its ``eval_from``, never an evaluation row; with
``--data``, windows whose truth ends before ``--end``, which is then required. ``--write DIR``
stores the fit in the model folder's ``kronos.json`` (``moves``, beside ``sampling``), where
``kronos forecast``, ``kronos eval``, the backtest and the service read it.

Example::

    kronos tune-moves --corpus CORPUS_DIR --split train --max-series-per-group 20 --windows 2
        --lookback 251 --horizon 5 --model MODEL_DIR --write MODEL_DIR --batch-size 64
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.eval.runner import add_window_arguments
    from kronos_core.loading import add_predictor_arguments

    add_window_arguments(parser)
    add_predictor_arguments(parser)
    parser.add_argument("--write", type=Path, metavar="MODEL_DIR",
                        help="write the fit into MODEL_DIR/kronos.json ('moves')")
    parser.add_argument("--json", type=Path, help="also write the per-step table as JSON here")


def write_moves(model_dir: Path, block: dict) -> Path:
    """Store ``block`` as the ``moves`` block of ``model_dir/kronos.json`` (other keys kept)."""
    from kronos_core.base.atomic import write_bytes_atomically

    file = model_dir / "kronos.json"
    meta = json.loads(file.read_text()) if file.is_file() else {}
    meta["moves"] = block
    write_bytes_atomically(file, (json.dumps(meta, indent=2) + "\n").encode())
    return file


def run(args) -> int:
    from kronos_core.cli.tune_sampling import validation_windows
    from kronos_core.eval.data import DataError
    from kronos_core.eval.evaluate import CLOSE
    from kronos_core.eval.moves import fit_moves
    from kronos_core.eval.runner import forecast_paths, sampling_for
    from kronos_core.eval.sources import load_source
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    args.horizon = [args.horizon]  # validation_windows takes tune-sampling's list of horizons
    args.move_correction = False  # fitted on the model's own paths ...
    args.price_limits = False  # ... as sampled: the predictor corrects before it limits
    try:
        source = load_source(args)
        predictor = load_predictor(predictor_config_from_args(args))
        w = validation_windows(args, predictor, source)
        horizon = args.horizon[0]
        if len(w) < 3:
            raise ValueError(f"{len(w)} windows fit before the evaluation periods; at least 3 "
                             "are needed (lower --lookback or raise --windows)")
        sampling = sampling_for(args, predictor)
        if sampling.sample_count < 2:
            raise ValueError("the move correction needs at least 2 paths per window: pass "
                             "--sample-count")
        print(f"kronos tune-moves: {len(w)} windows of {len(source.series)} series (each ends "
              f"before its evaluation period), model {predictor.identity.name}, "
              f"{sampling.describe()}", file=sys.stderr)
        paths, secs = forecast_paths(args, predictor, w, horizon, sampling)
        close = paths[..., CLOSE].astype(np.float64)  # (N, S, H)
        truth = w.truth[..., CLOSE].astype(np.float64)  # (N, H)
        last = w.context[:, -1, CLOSE].astype(np.float64)  # (N,)
        correction, fits = fit_moves(close, truth, last)
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"kronos tune-moves: {exc}", file=sys.stderr)
        return 2
    print("| step | lambda | kappa | windows | realised mean abs return | model's (raw) | "
          "corrected | MAE / last value, raw | corrected |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in fits:
        print(f"| {f.step} | {f.lam:.4f} | {f.kappa:.4f} | {f.windows} | "
              f"{f.realised_abs_return:.5f} | {f.raw_abs_return:.5f} | "
              f"{f.corrected_abs_return:.5f} | {f.raw_mae_over_last:.4f} | "
              f"{f.corrected_mae_over_last:.4f} |")
    print(f"\nforecast in {secs:.0f} s; lambda " + ", ".join(f"{v:.3f}" for v in correction.lam)
          + "; kappa " + ", ".join(f"{v:.3f}" for v in correction.kappa))
    block = {
        "lambda": [round(v, 6) for v in correction.lam],
        "kappa": [round(v, 6) for v in correction.kappa],
        "windows": len(w), "series": len(source.series), "lookback": args.lookback,
        "horizon": horizon, "step": args.step or horizon, "seed": args.seed,
        "sampling": sampling.as_dict(),
        "where": "windows whose truth ends before each series' eval_from"
        if source.corpus is not None else f"windows whose truth ends before {args.end}",
        "fitted_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "method": "lambda: least squares of the realised return on the mean path return through "
        "the origin, clipped to [0, 1]; kappa: the spread scale at which the mean over windows of "
        "the paths' mean |return| equals the realised mean |return| (kronos_core.eval.moves)",
        "steps": [f.as_dict() for f in fits],
    }
    if args.json:
        args.json.write_text(json.dumps(block, indent=2) + "\n")
    if args.write:
        file = write_moves(args.write, block)
        print(f"wrote the move correction into {file}")
    return 0
