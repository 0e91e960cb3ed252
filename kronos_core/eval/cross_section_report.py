"""``kronos eval --cross-section``: the model's and the factors' cross-section on a universe, its
JSON section, Markdown tables, PNGs and alphalens-layout factor data
(statistics: ``kronos_core.eval.cross_section``).

The model's signal at horizon h is the expected return of its paths, ``mean(path_close_h) / last
- 1``, from a window whose context ends at the date's candle (the symbol's own last ``lookback``
candles); its P(up) is the share of paths above the last close.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kronos_core.eval import cross_section as cs
from kronos_core.eval.data import Series
from kronos_core.eval.windows import Windows

log = logging.getLogger(__name__)
MODEL = "model"


@dataclass
class Cells:
    """Which (date row, symbol) each model window forecasts."""

    date_index: np.ndarray  # (N,) index into the rebalance rows
    symbol: np.ndarray  # (N,) symbol (column of the panel)


def model_windows(series: list[Series], panel: cs.Panel, rows: np.ndarray, ok: np.ndarray,
                  lookback: int, horizon: int) -> tuple[Windows, Cells]:
    """One window per eligible (date, symbol): the symbol's ``lookback`` candles up to and
    including the date; future stamps on its calendar as the service makes them (one
    computation per calendar and date)."""
    from kronos_core.data.timestamps import future_options, future_timestamps, template_history

    date_index, symbol = np.nonzero(ok[rows])  # (N,), (N,)
    n, width = len(date_index), series[0].values.shape[1]
    context = np.empty((n, lookback, width), dtype=np.float32)
    truth = np.full((n, horizon, width), np.nan, dtype=np.float32)
    origins = np.empty(n, dtype=np.int64)
    ctx_ts, fut_ts = [], []
    stamps_cache: dict = {}
    for i, (d, m) in enumerate(zip(date_index, symbol)):
        s = series[m]
        o = int(panel.own_row[rows[d], m]) + 1  # first row after the date
        origins[i] = o
        context[i] = s.values[o - lookback:o]
        future = s.values[o:o + horizon]
        truth[i, :len(future)] = future
        ts = s.timestamps[o - lookback:o]
        ctx_ts.append(ts)
        options = future_options(s.meta)
        key = (tuple(sorted(options.items())), ts[-1]) if options.get("exchange") else None
        if key is None or key not in stamps_cache:
            learn = template_history(s.timestamps, o, s.meta)
            made = future_timestamps(ts if learn is None else learn, horizon, **options)
            if key is None:
                fut_ts.append(made)
                continue
            stamps_cache[key] = made
        fut_ts.append(stamps_cache[key])
    w = Windows(symbol.astype(np.int64), origins, context, ctx_ts, fut_ts, truth,
                [s.name for s in series])
    last = panel.dates[rows[date_index]]
    if any(t[-1] != d for t, d in zip(ctx_ts, last)):  # structural: no context past its date
        raise cs.LookAheadError("a model window's context does not end at its rebalance date")
    return w, Cells(date_index, symbol)


def model_signals(paths: np.ndarray, w: Windows, cells: Cells, shape: tuple[int, int],
                  h: int) -> tuple[np.ndarray, np.ndarray]:
    """(R, M) expected h-step return and (R, M) P(up) from the paths (N, S, H, 6)."""
    last = w.context[:, -1, cs.CLOSE].astype(np.float64)  # (N,)
    at_h = paths[:, :, h - 1, cs.CLOSE].astype(np.float64)  # (N, S)
    expected = np.full(shape, np.nan)
    p_up = np.full(shape, np.nan)
    expected[cells.date_index, cells.symbol] = at_h.mean(axis=1) / last - 1.0
    p_up[cells.date_index, cells.symbol] = (at_h > last[:, None]).mean(axis=1)
    return expected, p_up


def signal_section(signal: np.ndarray, fwd: np.ndarray, mask: np.ndarray, close: np.ndarray,
                   rows: np.ndarray, q: int, top: int | None, cost_bps: float,
                   periods_per_year: float) -> tuple[dict, np.ndarray]:
    """Every figure of one signal at one horizon, and its RankIC by date (R,)."""
    rank_ic, ic = cs.per_date_ic(signal, fwd, mask)
    labels = cs.quantile_labels(signal, mask, q)
    qs = cs.quantile_stats(labels, fwd, q)
    qs.pop("_long_short_by_date")
    out = {**cs.ic_stats(rank_ic, ic), **qs,
           "portfolio": cs.topk_portfolio(close, rows, signal, mask, top, q, cost_bps,
                                          periods_per_year)}
    return out, rank_ic


def directional(expected: np.ndarray, p_up: np.ndarray, fwd: np.ndarray, mask: np.ndarray) -> dict:
    """The model's hit rate against the share of symbols that went up, and its P(up) Brier
    score against a constant 0.5's (0.25)."""
    m = mask & np.isfinite(expected) & np.isfinite(fwd)
    up = fwd[m] > 0
    return {"hit_rate": float(((expected[m] > 0) == up).mean()) if m.any() else None,
            "share_up": float(up.mean()) if m.any() else None,
            "brier_up": float(((p_up[m] - up) ** 2).mean()) if m.any() else None,
            "brier_constant_half": 0.25}


def cross_section(args, predictor, source, sampling) -> tuple[dict, dict]:
    """The report's ``cross_section`` section, and what the plots and factor data need."""
    from kronos_core.eval.backtest import periods_per_year
    from kronos_core.eval.runner import forecast_paths

    horizons = sorted(set(args.horizon))
    frequencies = {i.frequency for i in source.info}
    if len(frequencies) > 1:
        raise ValueError(f"--cross-section ranks one bar size at a time; the selection has "
                         f"{sorted(frequencies)} (choose one with --frequency)")
    panel = cs.Panel.from_series(source.series, source.eval_from)
    ok = cs.eligible(panel, args.lookback)
    rows = cs.rebalance_rows(panel, ok, args.every, horizons[-1], args.start, args.end,
                             args.min_names)
    if len(rows) < 2:
        raise ValueError(
            f"--cross-section: {len(rows)} rebalance date(s) with at least {args.min_names} "
            f"symbols ranked (lookback {args.lookback}, every {args.every}); give more symbols "
            "or history, or lower --min-names")
    factors = cs.factor_signals(panel.close, rows.tolist())
    w, cells = model_windows(source.series, panel, rows, ok, args.lookback, horizons[-1])
    log.info("cross-section: %d dates x up to %d symbols, %d model windows", len(rows),
             len(panel.names), len(w))
    paths, seconds = forecast_paths(args, predictor, w, horizons[-1], sampling)
    mask = ok[rows]  # (R, M)
    ppy = periods_per_year(panel.dates)
    q = args.factor_quantiles
    section: dict = {
        "dates": [str(d.date()) if d == d.normalize() else str(d) for d in panel.dates[rows]],
        "every": args.every, "lookback": args.lookback, "symbols": len(panel.names),
        "ranked_per_date": {"min": int(mask.sum(axis=1).min()),
                            "median": float(np.median(mask.sum(axis=1))),
                            "max": int(mask.sum(axis=1).max())},
        "windows": len(w), "forecast_seconds": round(seconds, 1),
        "factor_quantiles": q, "cost_bps": args.cost_bps,
        "signals": {MODEL: "mean path return to the horizon",
                    cs.REVERSAL: "minus the 5-row return", cs.MOMENTUM: "the 20-row return",
                    cs.LOW_VOL: "minus the std of the last 20 log returns"},
        "forward_return": "close[t + h] / close[t] - 1 on the calendar (a suspended symbol's "
                          "close carried forward)",
        "horizons": {},
    }
    extras: dict = {"panel": panel, "rows": rows, "mask": mask, "horizons": {}}
    for h in horizons:
        fwd = cs.forward_returns(panel.close, rows, h)
        expected, p_up = model_signals(paths, w, cells, mask.shape, h)
        signals = {MODEL: expected, **{name: f[rows] for name, f in factors.items()}}
        per_h: dict = {}
        by_date: dict = {}
        for name, sig in signals.items():
            per_h[name], by_date[name] = signal_section(sig, fwd, mask, panel.close, rows, q,
                                                        args.top_k, args.cost_bps, ppy)
        per_h[MODEL].update(directional(expected, p_up, fwd, mask))
        per_h[MODEL]["corr_with"] = {f: cs.mean_rank_corr(expected, signals[f], mask)
                                     for f in cs.FACTORS}
        partial = cs.partial_rank_ic(expected, signals[cs.REVERSAL], fwd, mask)
        per_h[MODEL]["rank_ic_after_reversal_5d"] = cs._mean(partial)
        per_h[MODEL]["rank_ic_after_reversal_5d_t"] = cs._t(partial)
        section["horizons"][str(h)] = per_h
        extras["horizons"][str(h)] = {"rank_ic_by_date": by_date, "signals": signals, "fwd": fwd}
    return section, extras


# ---- output -----------------------------------------------------------------------------------
def _f(v, fmt: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, fmt)


def markdown(section: dict) -> str:
    """Per horizon: a row per signal (RankIC, t, ICIR, IC, share > 0, long-short, t, top
    turnover, the portfolio's excess return, IR and drawdown); then the model's direction,
    Brier and its relation to the factors."""
    head = ["signal", "RankIC", "t", "ICIR", "IC", "RankIC > 0", "top − bottom", "t",
            "top turnover", "top-k ann. return", "excess vs universe", "IR", "max DD"]
    parts = [f"Cross-section: {len(section['dates'])} dates every {section['every']} rows, "
             f"{section['ranked_per_date']['min']}-{section['ranked_per_date']['max']} symbols "
             f"ranked a date, lookback {section['lookback']}, {section['factor_quantiles']} "
             f"quantiles, costs {section['cost_bps']:g} bps."]
    for h, per_h in section["horizons"].items():
        parts += ["", f"### Cross-section, horizon {h}", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, s in per_h.items():
            p = s["portfolio"]
            parts.append("| " + " | ".join([
                name, _f(s["rank_ic"], ".4f"), _f(s["rank_ic_t"], ".2f"), _f(s["icir"], ".2f"),
                _f(s["ic"], ".4f"), _f(s["rank_ic_positive"], ".2f"),
                _f(s["long_short"] and 100 * s["long_short"], ".2f") + "%",
                _f(s["long_short_t"], ".2f"), _f(s["top_turnover"], ".2f"),
                _f(p["annual_return"] * 100, ".1f") + "%",
                _f(p["annual_excess_return"] * 100, ".1f") + "%",
                _f(p["information_ratio"], ".2f"), _f(p["max_drawdown"] * 100, ".1f") + "%"])
                + " |")
        m = per_h[MODEL]
        corr = ", ".join(f"{k} {_f(v, '.2f')}" for k, v in m["corr_with"].items())
        parts += ["", f"Model, horizon {h}: hit rate {_f(m['hit_rate'])} (share up "
                  f"{_f(m['share_up'])}); Brier of P(up) {_f(m['brier_up'], '.4f')} (a constant "
                  f"0.5: 0.25); rank correlation with {corr}; **RankIC after removing 5-day "
                  f"reversal {_f(m['rank_ic_after_reversal_5d'], '.4f')} (t "
                  f"{_f(m['rank_ic_after_reversal_5d_t'], '.2f')})**."]
    return "\n".join(parts)


def write_factor_data(path: Path, extras: dict) -> Path:
    """Every signal in alphalens' layout: index (date, asset), forward return columns ``hD``,
    ``factor``, ``factor_quantile`` (deciles), one row block per signal (column ``signal``)."""
    panel, rows, mask = extras["panel"], extras["rows"], extras["mask"]
    dates = panel.dates[rows]
    frames = []
    hs = list(extras["horizons"])
    first = extras["horizons"][hs[-1]]
    for name, sig in first["signals"].items():
        labels = cs.quantile_labels(sig, mask, 10)
        j, m = np.nonzero(mask & np.isfinite(sig))
        frame = pd.DataFrame({"date": dates[j], "asset": np.array(panel.names)[m], "signal": name,
                              "factor": sig[j, m], "factor_quantile": labels[j, m]})
        for h in hs:
            frame[f"{h}D"] = extras["horizons"][h]["fwd"][j, m]
        frames.append(frame.set_index(["date", "asset"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames).to_parquet(path)
    return path


def write_plots(out: Path, section: dict, extras: dict) -> list[Path]:
    """Per horizon: the cumulative RankIC of every signal over the dates, and the mean forward
    return of each quantile."""
    from kronos_core.eval.plots import _plt

    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    dates = pd.DatetimeIndex(extras["panel"].dates[extras["rows"]])
    files = []
    for h, per_h in section["horizons"].items():
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for name, series in extras["horizons"][h]["rank_ic_by_date"].items():
            mean = _f(per_h[name]["rank_ic"], ".3f")
            ax.plot(dates, np.nancumsum(series), label=f"{name} (mean {mean})")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"Cumulative RankIC, horizon {h}")
        ax.set_ylabel("sum of RankIC over dates")
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
        files.append(out / f"cross_section_rank_ic_h{h}.png")
        fig.savefig(files[-1], dpi=110, bbox_inches="tight")
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(9, 4.5))
        names = list(per_h)
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            rets = [100 * (v if v is not None else np.nan) for v in per_h[name]["quantile_returns"]]
            x = np.arange(1, len(rets) + 1) + (i - (len(names) - 1) / 2) * width
            ax.bar(x, rets, width=width, label=name)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("signal quantile (1 lowest)")
        ax.set_ylabel(f"mean {h}-row forward return, %")
        ax.set_title(f"Forward return by signal quantile, horizon {h}")
        ax.legend(fontsize=8)
        files.append(out / f"cross_section_quantiles_h{h}.png")
        fig.savefig(files[-1], dpi=110, bbox_inches="tight")
        plt.close(fig)
    return files
