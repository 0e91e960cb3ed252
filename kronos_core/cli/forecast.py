"""``kronos forecast``: forecast the next candles of one CSV file from the command line.

Example::

    kronos forecast --csv prices.csv --horizon 24                # the bundled default model
    kronos forecast --model kronos-small --dtype bfloat16 \\
        --csv prices.csv --horizon 24 --samples 20 --quantiles 0.1,0.5,0.9 --out forecast.csv
    kronos forecast --csv 600518.SH.csv --horizon 5 --st     # held to the ST stock's ±5% a day

A Shanghai, Shenzhen or Beijing stock (its symbol: ``--symbol``, else the file name) has its
paths held inside the exchange's daily price limit (``kronos_core.base.price_limits``); the rule
used is printed. ``--no-price-limits``: paths as sampled.

A model with a fitted move correction (its ``kronos.json`` ``moves``: ``kronos_core.base.moves``)
has its paths re-centred and re-spread per step before the limits; the values used are printed.
``--no-move-correction``: the model's paths as sampled.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.base.options import ForecastOptions, quantile_column
from kronos_core.base.price_limits import (
    BOARDS,
    NO_LIMIT_BOARD,
    PriceLimitRule,
    rule_for,
)
from kronos_core.data.reader import add_reader_arguments
from kronos_core.data.timestamps import TEMPLATE_HISTORY_ROWS
from kronos_core.loading import add_predictor_arguments, load_predictor, predictor_config_from_args

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--csv", required=True, type=Path,
        help="candles (CSV or Parquet): timestamps, open, high, low, close[, volume, amount]; any "
             "case",
    )
    parser.add_argument("--horizon", required=True, type=int, help="candles to forecast")
    parser.add_argument("--lookback", type=int,
                        help="history candles to use (default: the --calibration file's fitted "
                        "lookback, else max_context - horizon; a shorter history is warned about)")
    # old spelling
    parser.add_argument("--timestamp-column", dest="time_column", help=argparse.SUPPRESS)
    parser.add_argument(
        "--exchange", metavar="MIC",
        help="the series' exchange (XNYS, XNAS, XSHG...): future timestamps follow its calendar",
    )
    add_reader_arguments(parser, repair_all="--repair-input")
    parser.add_argument("--samples", type=int,
                        help="sample paths (default: the model's, kronos.json 'sampling'; 1 "
                             "without one)")
    parser.add_argument("--temperature", "-T", type=float,
                        help="softmax temperature (default: the model's; 1 without one)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float,
                        help="nucleus mass, 1: off (default: the model's; 0.9 without one)")
    parser.add_argument("--seed", type=int, help="seed for reproducible sampling")
    parser.add_argument("--quantiles", help="comma-separated levels, e.g. 0.1,0.5,0.9")
    parser.add_argument(
        "--repair", action="store_true",
        help="make forecast candles consistent (high >= open/close ...)",
    )
    parser.add_argument(
        "--out", type=Path,
        help="write .csv, .parquet, .json or .xlsx (needs openpyxl) instead of printing",
    )
    parser.add_argument(
        "--calibration", type=Path,
        help="calibration JSON from `kronos calibrate` (fitted for this model) for the quantiles",
    )
    parser.add_argument(
        "--summary", action="store_true",
        help="also print the risk summary (expected return, P(up), volatility, VaR, ES)",
    )
    limits = parser.add_argument_group(
        "daily price limits", "Shanghai, Shenzhen and Beijing stocks: every path is held inside "
        "the exchange's limit, step by step (docs/price-limits.md)")
    limits.add_argument(
        "--symbol", help="the series' symbol, whose code and suffix name its board (600518.SH, "
        "300750.SZ, 688981.SH...); default: the file name without its suffix")
    limits.add_argument("--st", action="store_true",
                        help="the stock is under special treatment (ST, *ST): its tighter limit "
                        "(without it the ST status is unknown and the board's own limit is used)")
    limits.add_argument("--board", choices=(*BOARDS, NO_LIMIT_BOARD),
                        help="the board whose limit applies (default: from the code and exchange)")
    limits.add_argument("--listed", metavar="DATE",
                        help="the first trading day: a new listing's first days have no limit")
    limits.add_argument("--no-price-limits", action="store_true",
                        help="paths as sampled, not held inside the daily price limit")
    parser.add_argument("--no-move-correction", action="store_true",
                        help="the model's paths without its fitted move correction (kronos.json "
                        "'moves': centre shrunk toward the last value, spread sized to realised "
                        "moves)")
    add_predictor_arguments(parser)


def future_stamps(
    history: pd.DatetimeIndex, horizon: int, exchange: str | None = None
) -> pd.DatetimeIndex:
    from kronos_core.data.timestamps import future_timestamps

    return future_timestamps(history, horizon, exchange=exchange)


def options_from_args(args) -> ForecastOptions:
    """The forecast's options from the command line's flags (the ``--calibration`` file is
    loaded later, with the model, and added with ``options.with_``). Raises ``ValueError``
    naming a bad flag value."""
    levels = tuple(float(q) for q in args.quantiles.split(",")) if args.quantiles else ()
    return ForecastOptions(
        horizon=args.horizon, sample_count=args.samples or 1, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, quantiles=levels, repair=args.repair,
        price_limits=not args.no_price_limits,
        move_correction=not getattr(args, "no_move_correction", False),
    )


def price_limit_rule(args) -> PriceLimitRule | None:
    """The series' daily price-limit rule from ``--symbol`` (else the file name), ``--exchange``,
    ``--st``, ``--board`` and ``--listed``; None: no limit. ``ValueError`` names a bad value."""
    from kronos_core.data.reader import CSV_SUFFIXES, PARQUET_SUFFIXES

    symbol = args.symbol
    if not symbol:
        name = Path(args.csv).name
        ends = [s for s in CSV_SUFFIXES + PARQUET_SUFFIXES if name.lower().endswith(s)]
        symbol = name[: -len(max(ends, key=len))] if ends else Path(name).stem
    meta: dict = {"board": args.board, "listed": args.listed}
    if args.st:
        meta["special_treatment"] = True
    return rule_for(symbol, meta, args.exchange)


def read_input(args) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """The candles of ``--csv`` through the shared reader: ``(values (L, 6) float32,
    timestamps)``; raises ``CandleError`` with every problem of the file (and ``--out`` or
    ``--exchange`` problems) before any model is loaded."""
    from kronos_core.base.candles import candle_array
    from kronos_core.data.reader import check_output_path, read_candles, read_options_from_args

    if args.out:
        check_output_path(args.out)
    if args.exchange:
        from kronos_core.data.calendars import exchange_sessions

        exchange_sessions(args.exchange)  # UnknownExchangeError (a ValueError) names the fix
    frame, _tz, _report = read_candles(args.csv, read_options_from_args(args))
    return candle_array(frame), pd.DatetimeIndex(frame["timestamps"])


def requires(args) -> list:
    """``--out X.xlsx`` writes with openpyxl (the ``xlsx`` extra)."""
    from kronos_core.cli.requirements import needs

    xlsx = args.out is not None and str(args.out).lower().endswith(".xlsx")
    return needs(["openpyxl"], "--out .xlsx") if xlsx else []


def run(args) -> int:
    from kronos_core.base.candles import FEATURES, CandleError
    from kronos_core.model import CheckpointError

    if args.horizon < 1:
        print("kronos forecast: --horizon must be >= 1", file=sys.stderr)
        return 2
    try:
        options = options_from_args(args)  # flag errors before any file is read or model loaded
        rule = price_limit_rule(args)
        values, stamps = read_input(args)
    except (CandleError, ValueError) as exc:
        print(f"kronos forecast: {exc}", file=sys.stderr)
        return 2
    try:
        predictor = load_predictor(predictor_config_from_args(args))
        calibration = None
        if args.calibration:
            from kronos_core.calibration.conformal import Calibration

            calibration = Calibration.load(args.calibration)
            calibration.check_model(predictor.identity)
    except (CheckpointError, ValueError) as exc:
        print(f"kronos forecast: {exc}", file=sys.stderr)
        return 2
    if predictor.identity is not None and predictor.identity.random_weights:
        log.warning(
            "model %s has RANDOM weights: forecasts are not meaningful", predictor.identity.name
        )
    from kronos_core.base.lookback import (
        choose_lookback,
        history_cut_message,
        horizon_limit_message,
    )

    too_long = horizon_limit_message(args.horizon, predictor.max_context)
    if too_long is not None:  # before any work (the engine would refuse it too)
        print(f"kronos forecast: {too_long}", file=sys.stderr)
        return 2
    choice = choose_lookback(args.lookback, args.horizon, predictor.max_context, calibration)
    lookback = choice.value
    used = min(lookback, len(values))
    cut = history_cut_message(used, len(values), choice)
    if cut is not None:
        log.warning("%s", cut)
    # applied only where it was fitted; elsewhere raw quantiles, and why
    if calibration is not None:
        asked = [float(q) for q in str(args.quantiles or "").split(",") if q.strip()]
        calibration, why = calibration.for_series(args.horizon, asked, min(lookback, len(values)),
                                                  stamps[-lookback:], Path(args.csv).stem)
        if why:
            log.warning("--calibration %s not applied: %s", args.calibration, why)
    # sessions learned from the file's history before the window too, as the service learns them
    # from the store's (``template_history``); with --exchange its calendar decides
    future = future_stamps(stamps[-max(lookback, TEMPLATE_HISTORY_ROWS):], args.horizon,
                           args.exchange)
    values, stamps = values[-lookback:], stamps[-lookback:]
    if calibration is not None:
        options = options.with_(calibration=calibration)
    if args.samples is None:  # the model's path count (its sampling block), not one
        options = options.with_(sample_count=predictor.sampling.sample_count)
    options = options.with_defaults(predictor.sampling)
    log.info("sampling: %d paths, temperature %g, top-p %g (%s)", options.sample_count,
             options.temperature, options.top_p, predictor.sampling.source)
    res = predictor.forecast([values], [stamps], [future], options, verbose=sys.stderr.isatty(),
                             price_limits=[rule])
    if rule is not None:
        report = rule.report(stamps.to_numpy(), np.asarray(future), options.price_limits)
        held = "" if options.price_limits else " (not applied: --no-price-limits)"
        print(f"price limit: {report['rule']}{held}", file=sys.stderr)
    if predictor.moves is not None:
        moves = predictor.moves.report(args.horizon, options.move_correction)
        held = "" if options.move_correction else " (not applied: --no-move-correction)"
        print("move correction: lambda " + ", ".join(f"{v:.3f}" for v in moves["lambda"])
              + "; kappa " + ", ".join(f"{v:.3f}" for v in moves["kappa"])
              + f" per step ({moves['source']}){held}", file=sys.stderr)
    table = pd.DataFrame(
        res.mean[0], columns=list(FEATURES), index=pd.Index(future, name="timestamps")
    )
    for qi, q in enumerate(options.quantiles):
        for fi, f in enumerate(FEATURES):
            table[quantile_column(f, q)] = res.quantiles[qi, 0, :, fi]
    if args.out:
        from kronos_core.data.reader import write_table

        write_table(table, args.out)
        print(f"wrote {len(table)} forecast candles to {args.out}")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 50):
            print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    if args.summary:
        from kronos_core.eval.risk import risk_summary

        close = FEATURES.index("close")
        paths = res.paths  # with a calibration, the predictor already mapped them onto its bands
        # as the bands
        summary = risk_summary(paths[0, :, :, close], float(values[-1, close]), values[:, close])
        print("risk summary: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in summary.to_dict().items()))
    log.info("forecast of %d candles from %d history candles in %.2fs", args.horizon, len(values),
             res.stats.total_seconds)
    return 0 if np.isfinite(res.mean).all() else 1
