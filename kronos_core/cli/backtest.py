"""``kronos backtest``: walk-forward top-k portfolio from the model's forecasts, with costs.

Example::

    kronos backtest --data kronos_core/data/real/goog_daily.csv kronos_core/data/real/sp500_daily.csv \\
        --lookback 128 --horizon 5 --rebalance 5 --top 1 --cost-bps 5 --out backtest/
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.eval.runner import add_corpus_arguments, add_file_arguments
    from kronos_core.loading import add_predictor_arguments

    g = parser.add_argument_group("backtest")
    g.add_argument("--data", nargs="+",
                   help="CSV/Parquet files (one symbol each) or a store folder (or --corpus DIR)")
    g.add_argument("--symbols", nargs="+",
                   help="symbols to take from a store or the corpus (default: all)")
    g.add_argument("--lookback", type=int, default=128, help="context candles (default 128)")
    g.add_argument(
        "--horizon", type=int, required=True,
        help="forecast candles; ranks use the return to the end",
    )
    g.add_argument("--rebalance", type=int, required=True, help="rows between rebalances")
    g.add_argument(
        "--top", type=int, required=True, help="symbols held long (and short with --long-short)"
    )
    g.add_argument("--long-short", action="store_true", help="also short the bottom k")
    g.add_argument("--rank", default="return", choices=["return", "sharpe"],
                   help="rank by forecast return, or by forecast return over its volatility")
    g.add_argument(
        "--cost-bps", type=float, default=0.0, help="costs in basis points per unit of turnover"
    )
    g.add_argument(
        "--momentum-window", type=int,
        help="trailing rows of the momentum baseline (default: lookback)",
    )
    g.add_argument("--start", help="first rebalance at or after this time")
    g.add_argument("--end", help="last rebalance at or before this time")
    g.add_argument(
        "--sample-count", type=int, default=16, help="sample paths per symbol (default 16)"
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch-size", type=int, default=None,
                   help="windows per engine call; the windows of all rebalance dates share calls "
                        "(default: 128 rows of windows x paths on a CPU, 16,384 on a GPU within "
                        "its free memory; --per-date: 512)")
    g.add_argument("--per-date", action="store_true",
                   help="forecast one rebalance date per engine call, as before issue 44 (the "
                        "same scores, slower; for timing comparisons)")
    g.add_argument("--no-price-limits", dest="price_limits", action="store_false",
                   help="paths as sampled: not held inside the daily price limit of a Shanghai, "
                   "Shenzhen or Beijing stock (docs/price-limits.md)")
    g.add_argument("--out", type=Path, help="folder for backtest.json, backtest.md and equity.png")
    add_file_arguments(parser)
    add_corpus_arguments(parser)
    add_predictor_arguments(parser)


def requires(args) -> list:
    """``--out`` writes equity.png with matplotlib (the ``eval`` extra)."""
    from kronos_core.cli.requirements import needs

    return needs(["matplotlib"], "--out (equity.png)") if args.out else []


def corpus_start(args, source) -> str | None:
    """The first rebalance allowed: with a corpus, the latest ``eval_from`` of the universe (every
    decision and every return it earns inside every series' evaluation period); a ``--start``
    before it is an error."""
    import pandas as pd

    if source.corpus is None:
        return args.start
    latest = max(source.eval_from)
    if args.start is not None and pd.Timestamp(args.start) < latest:
        raise ValueError(f"--start {args.start} is before the evaluation period of the corpus "
                         f"series (the latest eval_from of the universe is {latest}); a backtest "
                         "on the corpus trades only inside it")
    return args.start or str(latest)


def run(args) -> int:
    from kronos_core.eval.data import DataError
    from kronos_core.eval.portfolio import Universe, markdown, run_backtest
    from kronos_core.eval.sources import load_source
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    try:
        source = load_source(args)
        start = corpus_start(args, source)
        uni = Universe.from_series(source.series)
        if not args.price_limits:  # no symbol has a rule
            uni.price_limits = []
        predictor = load_predictor(predictor_config_from_args(args))
        res = run_backtest(
            predictor, uni, args.lookback, args.horizon, args.rebalance, args.top, args.long_short,
            args.cost_bps, args.rank, args.sample_count, args.momentum_window, start, args.end,
            args.seed, args.batch_size, per_date=args.per_date,
        )
    except (DataError, CheckpointError, ValueError) as exc:
        print(f"kronos backtest: {exc}", file=sys.stderr)
        return 2
    table = markdown(res.performance)
    n = len(res.rows) * len(uni.names)
    note = (f"{len(res.rows)} rebalances x {len(uni.names)} symbols forecast in {res.seconds:.1f}s "
            f"({n / res.seconds:.2f} forecasts/s); {args.cost_bps:g} bps per unit turnover")
    print(table + "\n\n" + note)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "model": predictor.identity.as_dict(),
            "data": {
                "symbols": uni.names, "rows": len(uni.timestamps), "first": str(uni.timestamps[0]),
                "last": str(uni.timestamps[-1]),
            },
            "settings": {
                k: getattr(args, k)
                for k in (
                    "lookback", "horizon", "rebalance", "top", "long_short", "rank", "cost_bps",
                    "sample_count", "seed", "end",
                )
            }
            | {"start": start}
            | res.extra,
            "performance": res.performance,
            "decisions": res.decisions,
        }
        (args.out / "backtest.json").write_text(json.dumps(report, indent=1, default=float))
        (args.out / "backtest.md").write_text(
            f"# Backtest ({predictor.identity.name})\n\n{table}\n\n{note}\n"
        )
        from kronos_core.eval.plots import equity_plot

        ts = uni.timestamps[[res.rows[0] - 1, *res.sims["model"].rows]]
        equity_plot(
            args.out / "equity.png", ts, {k: s.equity for k, s in res.sims.items()},
            f"backtest: top {args.top}{' long-short' if args.long_short else ''}, "
            f"{predictor.identity.name}",
        )
        print(f"wrote {args.out}/backtest.json, backtest.md, equity.png")
    return 0
