"""Every forecaster on the same windows, per hold-out and (market, frequency) group, per horizon.

The windows are forecast once at the longest horizon asked; horizon ``h`` scores the first ``h``
steps of each window (the same as a run at ``--horizon h`` on those origins: a forecast's first
steps do not depend on how far it goes on).

Per (hold-out, market, frequency) row, and per hold-out over all its groups, on the close:

* every forecaster's MASE, CRPS, scaled CRPS (``crps_scaled``: each window's CRPS divided by its
  MASE scale, the in-sample mean absolute one-step change of its context, then averaged; so a
  high-priced series does not outweigh the others), direction accuracy, Brier score of P(up),
  coverage;
* each model against the baselines: MASE / last value's, scaled CRPS / the historical-volatility
  band's, scaled CRPS / GARCH's, as ratios with a verdict (``better`` below 0.98, ``worse``
  above 1.02, else ``tie``: within 2% is a tie); direction accuracy against the drift
  forecast's, Brier against GARCH's and the band's (a coin's, 0.25, for a driftless band);
* paired tests (``kronos_core.eval.paired``) of each model against each baseline and each other
  model, on the per-window scaled CRPS and absolute error;
* every distribution's volatility skill at step h (``kronos_core.eval.volatility``): the rank
  correlation of its spread with the realised |return|, and its mean |return| over the realised.

CRPS is the fair ensemble estimate for sampled forecasters (the model, GARCH) and the plug-in one
for the band's stratified quantile grid and the point forecasts (``Forecaster.crps_estimator``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kronos_core.eval import paired
from kronos_core.eval.metrics import FAIR
from kronos_core.eval.scoring import DEFAULT_COVERAGE, DEFAULT_QUANTILES, headline, score
from kronos_core.eval.sources import GIVEN, INSTRUMENT, TIME, SeriesInfo
from kronos_core.eval.volatility import volatility_skill
from kronos_core.eval.windows import Windows

TIE = 0.02  # a ratio within 2% of 1 is a tie
HOLDOUT_ORDER = (TIME, INSTRUMENT, GIVEN)
ALL = "all"
# (label, forecaster, baseline, metric): the model-vs-baseline ratios of every row
RATIOS = (("mase_vs_last_value", "last_value", "mase"),
          ("crps_vs_hist_vol", "hist_vol", "crps_scaled"),
          ("crps_vs_garch", "garch", "crps_scaled"))
TESTED_BASELINES = ("last_value", "hist_vol", "garch")


@dataclass
class Forecaster:
    """One row of the comparison: a model (raw or calibrated) or a baseline, on all N windows."""

    name: str
    samples: np.ndarray  # (N, S, H) close
    point: np.ndarray  # (N, H)
    is_model: bool = False
    # (window indices, horizon) -> quantile function at any levels; None: the samples' quantiles
    quantiles: Callable | None = None
    calibration: str | None = None  # the calibration file applied, for calibrated rows
    crps_estimator: str = FAIR  # random draws: fair; a quantile grid or a point: plug-in


def verdict(ratio: float | None) -> str | None:
    if ratio is None or not np.isfinite(ratio):
        return None
    return "better" if ratio < 1 - TIE else "worse" if ratio > 1 + TIE else "tie"


def _ratio(a, b) -> dict:
    r = a / b if a is not None and b not in (None, 0) else None
    return {"ratio": r, "verdict": verdict(r)}


def _card(f: Forecaster, w: Windows, idx: np.ndarray, h: int, quantiles, coverage) -> dict:
    from kronos_core.eval.evaluate import CLOSE

    truth = w.truth[idx, :h, CLOSE].astype(np.float64)  # (n, h)
    history = w.context[idx, :, CLOSE].astype(np.float64)  # (n, L)
    qfn = f.quantiles(idx, h) if f.quantiles is not None else None
    card = score(f.samples[idx, :, :h], f.point[idx, :h], truth, history[:, -1], history,
                 quantiles, coverage, qfn, crps_estimator=f.crps_estimator)
    out = headline(card)
    if f.samples.shape[1] > 1:  # a distribution: its volatility skill at step h
        out["volatility"] = volatility_skill(f.samples[idx, :, :h], truth, history[:, -1])
    return out


def _row(w, idx, h, forecasters, losses, quantiles, coverage) -> dict:
    cards = {f.name: _card(f, w, idx, h, quantiles, coverage) for f in forecasters}
    for f in forecasters:  # CRPS in MASE units: comparable across series and groups
        scaled = losses[f.name]["crps"][idx]
        scaled = scaled[np.isfinite(scaled)]
        cards[f.name]["crps_scaled"] = float(scaled.mean()) if scaled.size else None
    models = {}
    for f in forecasters:
        if not f.is_model:
            continue
        mine = cards[f.name]
        cmp: dict = {label: _ratio(mine[metric], cards[base][metric]) if base in cards else None
                     for label, base, metric in RATIOS}
        if "drift" in cards:
            cmp["direction_vs_drift"] = {"model": mine["direction_accuracy"],
                                         "drift": cards["drift"]["direction_accuracy"]}
        for base in ("garch", "hist_vol"):
            if base in cards:
                cmp[f"brier_vs_{base}"] = {"model": mine["brier_up"], base: cards[base]["brier_up"]}
        others = [g.name for g in forecasters if g.name != f.name and
                  (g.is_model or g.name in TESTED_BASELINES)]
        cmp["tests"] = {o: paired.compare({k: v[idx] for k, v in losses[f.name].items()},
                                          {k: v[idx] for k, v in losses[o].items()}, h)
                        for o in others}
        models[f.name] = cmp
    return {"windows": int(len(idx)), "series": int(len(np.unique(w.series_index[idx]))),
            "forecasters": cards, "models": models}


def grouped_report(w: Windows, info: Sequence[SeriesInfo], forecasters: Sequence[Forecaster],
                   horizons: Sequence[int], quantiles=DEFAULT_QUANTILES,
                   coverage=DEFAULT_COVERAGE) -> dict:
    """{"horizons": {h: [rows]}, "tie": 0.02, "test": method}; each row names its ``holdout``,
    ``market`` and ``frequency`` (``all`` for a hold-out's pooled row; the last row pools every
    window)."""
    from kronos_core.eval.evaluate import CLOSE

    per_window = [info[int(k)] for k in w.series_index]
    holdout = np.array([i.holdout for i in per_window])
    group = np.array([f"{i.market}\t{i.frequency}" for i in per_window])
    history = w.context[..., CLOSE].astype(np.float64)
    out: dict = {"horizons": {}, "tie": TIE, "test": paired.METHOD,
                 "horizon_rule": "horizon h scores the first h steps of each window",
                 "calibration": {f.name: f.calibration for f in forecasters if f.is_model}}
    for h in horizons:
        truth = w.truth[:, :h, CLOSE].astype(np.float64)
        losses = {f.name: paired.window_losses(f.samples[:, :, :h], f.point[:, :h], truth, history,
                                               f.crps_estimator)
                  for f in forecasters}
        rows = []
        for ho in [x for x in HOLDOUT_ORDER if x in set(holdout)]:
            in_ho = holdout == ho
            for g in sorted(set(group[in_ho])):
                idx = np.flatnonzero(in_ho & (group == g))
                market, frequency = g.split("\t")
                rows.append({"holdout": ho, "market": market, "frequency": frequency,
                             **_row(w, idx, h, forecasters, losses, quantiles, coverage)})
            pooled = _row(w, np.flatnonzero(in_ho), h, forecasters, losses, quantiles, coverage)
            rows.append({"holdout": ho, "market": ALL, "frequency": ALL, **pooled})
        if len(set(holdout)) > 1:
            rows.append({"holdout": ALL, "market": ALL, "frequency": ALL,
                         **_row(w, np.arange(len(w)), h, forecasters, losses, quantiles, coverage)})
        out["horizons"][str(h)] = rows
    return out


# ---- Markdown ------------------------------------------------------------------------------
def _f(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


def _p(test: dict | None) -> str:
    if not test or test.get("p_value") is None:
        return "—"
    p = test["p_value"]
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def _vs(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "—"
    return f"{r['ratio']:.3f} {r['verdict']}"


HOLDOUT_TITLES = {TIME: "time hold-out (train instruments, evaluation period)",
                  INSTRUMENT: "instrument hold-out (never-trained instruments, evaluation period)",
                  GIVEN: "the given series", ALL: "all windows"}


def markdown(report: dict) -> str:
    """One table per horizon and hold-out: a row per group and model (module docstring)."""
    head = ["market", "freq", "series", "windows", "model", "calibration", "MASE", "last value",
            "MASE ratio",
            "sCRPS", "hist-vol", "sCRPS ratio", "GARCH", "sCRPS ratio", "dir. acc.", "drift",
            "Brier", "GARCH", "p CRPS vs hist-vol", "p |err| vs last value", "p CRPS vs GARCH"]
    parts = []
    for h, rows in report["horizons"].items():
        for ho in [x for x in (*HOLDOUT_ORDER, ALL) if any(r["holdout"] == x for r in rows)]:
            parts += [f"### Horizon {h}, {HOLDOUT_TITLES[ho]}", "",
                      "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in (r for r in rows if r["holdout"] == ho):
                fc = r["forecasters"]
                for name, cmp in r["models"].items():
                    me, t = fc[name], cmp["tests"]
                    cal = report.get("calibration", {}).get(name)
                    cells = [r["market"], r["frequency"], str(r["series"]), str(r["windows"]), name,
                             Path(cal).name if cal else "none",
                             _f(me["mase"]), _f(fc.get("last_value", {}).get("mase")),
                             _vs(cmp.get("mase_vs_last_value")),
                             _f(me["crps_scaled"]), _f(fc.get("hist_vol", {}).get("crps_scaled")),
                             _vs(cmp.get("crps_vs_hist_vol")),
                             _f(fc.get("garch", {}).get("crps_scaled")),
                             _vs(cmp.get("crps_vs_garch")),
                             _f(me["direction_accuracy"]),
                             _f(fc.get("drift", {}).get("direction_accuracy")),
                             _f(me["brier_up"]), _f(fc.get("garch", {}).get("brier_up")),
                             _p(t.get("hist_vol", {}).get("crps")),
                             _p(t.get("last_value", {}).get("abs_error")),
                             _p(t.get("garch", {}).get("crps"))]
                    parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
    return "\n".join(parts).rstrip()


VOLATILITY_FORECASTERS = ("hist_vol", "garch")


def volatility_markdown(report: dict) -> str:
    """Per horizon, the pooled row of each hold-out: every model's and the band's and GARCH's
    spread-rank correlation and |return| ratio (``kronos_core.eval.volatility``)."""
    head = ["horizon", "hold-out", "windows", "forecaster", "paths", "spread rank corr",
            "forecast |ret|", "realised |ret|", "|ret| ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for h, rows in report["horizons"].items():
        for r in (r for r in rows if r["market"] == ALL):
            names = [*r["models"], *(n for n in VOLATILITY_FORECASTERS if n in r["forecasters"])]
            for name in names:
                card = r["forecasters"][name]
                v = card.get("volatility") or {}
                lines.append("| " + " | ".join([
                    h, r["holdout"], str(r["windows"]), name, str(card.get("paths", "—")),
                    _f(v.get("spread_rank_corr")), _f(v.get("forecast_abs_return")),
                    _f(v.get("realised_abs_return")), _f(v.get("abs_return_ratio"))]) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def comparison_markdown(report: dict) -> str:
    """Model-against-model paired tests on all windows (empty with one model)."""
    lines: list[str] = []
    for h, rows in report["horizons"].items():
        pooled = rows[-1]
        model_names = list(pooled["models"])
        pairs = [(a, b) for i, a in enumerate(model_names) for b in model_names[i + 1:]]
        if not pairs:
            continue
        if not lines:
            lines = ["| horizon | windows | A | B | CRPS A − B (scaled) | p "
                     "| |err| A − B (scaled) | p |",
                     "|---|---|---|---|---|---|---|---|"]
        for a, b in pairs:
            t = pooled["models"][a]["tests"][b]
            crps, err = t["crps"], t["abs_error"]
            lines.append(f"| {h} | {pooled['windows']} | {a} | {b} | "
                         f"{_f(crps['mean_difference'])} | {_p(crps)} | "
                         f"{_f(err['mean_difference'])} | {_p(err)} |")
    return "\n".join(lines)
