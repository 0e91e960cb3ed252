"""Score a model's walk-forward forecasts and the baselines on the same windows.

``evaluate`` returns the ``metrics``, ``baselines``, ``regimes`` and ``series`` sections
of the report written by ``kronos eval``; ``markdown`` renders them as tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kronos_core.base.candles import FEATURES
from kronos_core.eval import baselines as bl
from kronos_core.eval.metrics import FAIR, PLUG_IN, point_forecast
from kronos_core.eval.regimes import REGIME_THRESHOLD, REGIME_WINDOW, REGIMES, classify
from kronos_core.eval.scoring import DEFAULT_COVERAGE, DEFAULT_QUANTILES, headline, score
from kronos_core.eval.windows import Windows

CLOSE = FEATURES.index("close")


def baseline_samples(
    w: Windows, seasons: Sequence[int | None], horizon: int
) -> dict[str, np.ndarray]:
    """Each baseline's samples (N, S, H) of the close. Seasonal naive only when every series has a
    season."""
    history = w.context[..., CLOSE].astype(np.float64)  # (N, L)
    out = {"last_value": bl.last_value(history, horizon), "drift": bl.drift(history, horizon)}
    per_window = [seasons[k] for k in w.series_index]
    if all(s and s <= history.shape[1] for s in per_window):
        sn = np.empty((len(w), 1, horizon))
        for s in set(per_window):
            m = np.array([p == s for p in per_window])
            sn[m] = bl.seasonal_naive(history[m], horizon, s)
        out["seasonal_naive"] = sn
    out["hist_vol"] = bl.hist_vol(history, horizon)
    return out


POINT_BY_MEDIAN = ("hist_vol", "garch")  # baselines whose point forecast is their median


def baseline_crps_estimator(name: str) -> str:
    """How a baseline's CRPS is estimated: GARCH's paths are random draws (the fair estimator,
    as for the model); the band's are a stratified quantile grid and the others point forecasts,
    whose own values are the distribution (plug-in)."""
    return FAIR if name == "garch" else PLUG_IN


def baseline_point(name: str, samples: np.ndarray) -> np.ndarray:
    """A baseline's point forecast (N, H) from its samples (N, S, H)."""
    return np.median(samples, axis=1) if name in POINT_BY_MEDIAN else samples.mean(axis=1)


def _cards(w: Windows, idx, model_samples, base, quantiles, coverage,
           calibrated, point: str = "mean") -> tuple[dict, dict]:
    truth = w.truth[idx, :, CLOSE].astype(np.float64)  # (n, H)
    history = w.context[idx, :, CLOSE].astype(np.float64)  # (n, L)
    last = history[:, -1]
    if calibrated is not None:  # the calibrated distribution: corrected paths and quantiles
        ms = calibrated.paths[idx, :, :, CLOSE].astype(np.float64)  # (n, S, H)
        qfn = calibrated.quantile_fn(idx)
    else:
        ms, qfn = model_samples[idx], None  # (n, S, H)
    model = score(ms, point_forecast(ms, point), truth, last, history, quantiles, coverage, qfn)
    baselines = {}
    for name, s in base.items():
        bs = s[idx]
        baselines[name] = score(bs, baseline_point(name, bs), truth, last, history, quantiles,
                                coverage, crps_estimator=baseline_crps_estimator(name))
    return model, baselines


def evaluate(
    w: Windows, paths: np.ndarray, seasons: Sequence[int | None], quantiles=DEFAULT_QUANTILES,
    coverage=DEFAULT_COVERAGE, calibrated=None, all_features: bool = False,
    extra_baselines: dict[str, np.ndarray] | None = None, point: str = "mean",
) -> dict:
    """metrics / baselines / regimes / series sections from the model's paths (N, S, H, 6) on
    ``w``. ``calibrated`` (``CalibratedPaths``): ``metrics`` (and the regimes and series) score
    the calibrated distribution, and ``metrics_raw`` the raw paths. ``extra_baselines``: more
    baseline samples (N, S, H) of the close, e.g. GARCH. ``point``: the model's point forecast,
    the mean or the median of its paths."""
    horizon = paths.shape[2]
    model_samples = paths[..., CLOSE].astype(np.float64)  # (N, S, H)
    base = baseline_samples(w, seasons, horizon)
    base.update(extra_baselines or {})
    everything = np.arange(len(w))
    metrics, baselines = _cards(w, everything, model_samples, base, quantiles, coverage, calibrated,
                                point)
    raw = None
    if calibrated is not None:
        raw, _ = _cards(w, everything, model_samples, {}, quantiles, coverage, None, point)
    if all_features:
        metrics["features"] = {}
        for fi, f in enumerate(FEATURES):
            s = paths[..., fi].astype(np.float64)
            tr = w.truth[..., fi].astype(np.float64)
            hist = w.context[..., fi].astype(np.float64)
            card = score(s, s.mean(axis=1), tr, hist[:, -1], hist, quantiles, coverage)
            metrics["features"][f] = headline(card)
    labels = classify(w.context[..., CLOSE].astype(np.float64))
    regimes = {
        "rule": {
            "window": REGIME_WINDOW, "threshold": REGIME_THRESHOLD,
            "trend": "log return over the window / (std of one-bar log returns * sqrt(window))",
            "bull": f"trend > {REGIME_THRESHOLD}", "bear": f"trend < -{REGIME_THRESHOLD}",
            "sideways": "otherwise",
        }
    }
    for r in REGIMES:
        idx = np.flatnonzero(labels == r)
        if len(idx) == 0:
            regimes[r] = {"windows": 0}
            continue
        m, b = _cards(w, idx, model_samples, base, quantiles, coverage, calibrated, point)
        regimes[r] = {"windows": int(len(idx)), "model": headline(m),
                      "baselines": {k: headline(v) for k, v in b.items()}}
    per_series = {}
    for k, name in enumerate(w.names):
        idx = np.flatnonzero(w.series_index == k)
        if len(idx):
            m, b = _cards(w, idx, model_samples, base, quantiles, coverage, calibrated, point)
            per_series[name] = {"windows": int(len(idx)), "model": headline(m),
                                "baselines": {n: headline(v) for n, v in b.items()}}
    out = {"metrics": metrics, "baselines": baselines, "regimes": regimes, "series": per_series}
    if raw is not None:
        out["metrics_raw"] = raw
    return out


def _fmt(v, pct=False) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—"
    return f"{100 * v:.1f}" if pct else f"{v:.4g}"


def table(rows: dict[str, dict], coverage=DEFAULT_COVERAGE) -> str:
    """Markdown table: one row per forecaster, the headline metrics as columns."""
    cov_cols = [f"{c:g}" for c in coverage]
    head = ["forecaster", "MAE", "RMSE", "MAPE %", "MASE", "dir. acc.", "CRPS", "Brier up"] + \
        [f"cov {c}" for c in cov_cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, c in rows.items():
        cells = [name, _fmt(c["mae"]), _fmt(c["rmse"]), _fmt(c["mape"]), _fmt(c["mase"]),
                 _fmt(c["direction_accuracy"]), _fmt(c["crps"]), _fmt(c["brier_up"])]
        cells += [_fmt(c["coverage"].get(k), pct=True) for k in cov_cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(report: dict, coverage=DEFAULT_COVERAGE, extra_rows: dict | None = None) -> str:
    """The report's tables: all windows, then per series (when there are several), then per regime.
    With a calibration the first model has two rows, raw and calibrated (the per-series and regime
    tables: calibrated). ``extra_rows``: more forecasters' headline cards (other models)."""
    name = report["model"].get("name", "model")
    if "metrics_raw" in report:
        label = f"{name} + calibration"
        rows = {f"{name} (raw)": report["metrics_raw"], label: report["metrics"]}
    else:
        label = name
        rows = {name: report["metrics"]}
    rows.update(extra_rows or {})
    rows.update(report["baselines"])
    name = label
    parts = [f"### All windows ({report['metrics']['windows']})", "", table(rows, coverage)]
    per_series = report.get("series") or {}
    if len(per_series) > 1:
        for sname, card in per_series.items():
            parts += ["", f"### Series {sname} ({card['windows']} windows)", "",
                      table({name: card["model"], **card["baselines"]}, coverage)]
    for r in REGIMES:
        reg = report["regimes"][r]
        if reg.get("windows"):
            parts += ["", f"### Regime {r} ({reg['windows']} windows)", "",
                      table({name: reg["model"], **reg["baselines"]}, coverage)]
    return "\n".join(parts)
