"""``kronos forecast``: forecast the next candles of one CSV file from the command line.

Example::

    kronos forecast --csv prices.csv --horizon 24                # the bundled default model
    kronos forecast --model kronos-small --dtype bfloat16 \\
        --csv prices.csv --horizon 24 --samples 20 --quantiles 0.1,0.5,0.9 --out forecast.csv
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.loading import add_predictor_arguments, load_predictor, predictor_config_from_args

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", required=True, type=Path, help="candles: timestamps, open, high, low, close[, volume, amount]")
    parser.add_argument("--horizon", required=True, type=int, help="candles to forecast")
    parser.add_argument("--lookback", type=int, help="history candles to use (default: what fits max_context with the horizon)")
    parser.add_argument("--timestamp-column", default="timestamps")
    parser.add_argument("--samples", type=int, default=1, help="sample paths (default 1)")
    parser.add_argument("--temperature", "-T", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--seed", type=int, help="seed for reproducible sampling")
    parser.add_argument("--quantiles", help="comma-separated levels, e.g. 0.1,0.5,0.9")
    parser.add_argument("--repair", action="store_true", help="make forecast candles consistent (high >= open/close ...)")
    parser.add_argument("--out", type=Path, help="write .csv, .parquet or .json instead of printing")
    parser.add_argument("--calibration", type=Path,
                        help="calibration JSON from `kronos calibrate` (fitted for this model) for the quantiles")
    parser.add_argument("--summary", action="store_true",
                        help="also print the risk summary (expected return, P(up), volatility, VaR, ES)")
    add_predictor_arguments(parser)


def future_stamps(history: pd.DatetimeIndex, horizon: int) -> pd.DatetimeIndex:
    from kronos_core.data.timestamps import future_timestamps

    return future_timestamps(history, horizon)


def run(args) -> int:
    from kronos_core.candles import FEATURES, CandleError, candle_array
    from kronos_core.model import CheckpointError

    if args.horizon < 1:
        print("kronos forecast: --horizon must be >= 1", file=sys.stderr)
        return 2
    try:
        df = pd.read_csv(args.csv)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        print(f"kronos forecast: cannot read {args.csv}: {exc}", file=sys.stderr)
        return 2
    if args.timestamp_column not in df.columns:
        print(f"kronos forecast: {args.csv} has no {args.timestamp_column!r} column (columns: {list(df.columns)})",
              file=sys.stderr)
        return 2
    stamps = pd.DatetimeIndex(pd.to_datetime(df[args.timestamp_column]))
    try:
        values = candle_array(df)
    except CandleError as exc:
        print(f"kronos forecast: {args.csv}: {exc}", file=sys.stderr)
        return 2
    try:
        predictor = load_predictor(predictor_config_from_args(args))
        calibration = None
        if args.calibration:
            from kronos_core.eval.calibration import Calibration

            calibration = Calibration.load(args.calibration)
            calibration.check_model(predictor.identity)
    except (CheckpointError, ValueError) as exc:
        print(f"kronos forecast: {exc}", file=sys.stderr)
        return 2
    if predictor.identity is not None and predictor.identity.random_weights:
        log.warning("model %s has RANDOM weights: forecasts are not meaningful", predictor.identity.name)
    lookback = args.lookback or max(1, min(len(df), predictor.max_context - args.horizon))
    values, stamps = values[-lookback:], stamps[-lookback:]
    future = future_stamps(stamps, args.horizon)
    levels = tuple(float(q) for q in args.quantiles.split(",")) if args.quantiles else ()
    res = predictor.forecast(
        [values], [stamps], [future], args.horizon, sample_count=args.samples, T=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, quantiles=levels, repair=args.repair,
        verbose=sys.stderr.isatty(), calibration=calibration,
    )
    table = pd.DataFrame(res.mean[0], columns=list(FEATURES), index=pd.Index(future, name="timestamps"))
    for qi, q in enumerate(levels):
        for fi, f in enumerate(FEATURES):
            table[f"{f}_q{q:g}"] = res.quantiles[qi, 0, :, fi]
    if args.out:
        suffix = args.out.suffix.lower()
        if suffix == ".parquet":
            table.to_parquet(args.out)
        elif suffix == ".json":
            table.reset_index().to_json(args.out, orient="records", date_format="iso", indent=1)
        else:
            table.to_csv(args.out)
        print(f"wrote {len(table)} forecast candles to {args.out}")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 50):
            print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    if args.summary:
        from kronos_core.eval.risk import risk_summary

        close = FEATURES.index("close")
        summary = risk_summary(res.paths[0, :, :, close], float(values[-1, close]), values[:, close])
        print("risk summary: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in summary.to_dict().items()))
    log.info("forecast of %d candles from %d history candles in %.2fs", args.horizon, len(values),
             res.stats.total_seconds)
    return 0 if np.isfinite(res.mean).all() else 1
