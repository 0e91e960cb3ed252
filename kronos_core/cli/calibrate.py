"""``kronos calibrate``: fit conformal corrections of the forecast quantiles on walk-forward windows
(CQR, width-scaled CQR, nested selection between them, or adaptive conformal inference).

Example (fit on the first 70% of each series, show coverage before/after on the rest)::

    kronos calibrate --data kronos_core/data/real/goog_daily.csv --lookback 128 --horizon 5 \\
        --windows 100 --sample-count 32 --holdout 0.3 --out calibration.json

The correction is per horizon step and interval level (see
``kronos_core.calibration.conformal``); apply it with ``kronos forecast --calibration``,
``kronos eval --calibration`` or ``ForecastOptions(..., calibration=...)`` in
``KronosPredictor.forecast``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.calibration.conformal import METHODS
    from kronos_core.eval.runner import add_window_arguments
    from kronos_core.loading import add_predictor_arguments

    add_window_arguments(parser)
    add_predictor_arguments(parser)
    parser.add_argument(
        "--method", default="cqr", choices=METHODS,
        help="cqr: Romano et al. 2019 on log prices; cqr-r: scores scaled by the interval width; "
        "select: cqr or cqr-r, whichever covers nearer nominal on the later half of the "
        "calibration windows; aci: adaptive conformal inference (Gibbs & Candès 2021)",
    )
    parser.add_argument(
        "--compare", type=lambda t: tuple(m for m in t.split(",") if m), default=(),
        metavar="METHOD,...",
        help="with --holdout: also fit these methods on the same windows "
        "and add their held-out coverage to the table",
    )
    parser.add_argument(
        "--holdout", type=float,
        help="fit on windows before the last FRACTION of each series (from --start / "
             "--last-fraction on) and "
        "report coverage before/after calibration on windows in that last part",
    )
    parser.add_argument("--holdout-windows", type=int,
                        help="held-out windows per series (default: --windows); with --corpus, the "
                             "held-out coverage table (on each series' evaluation period) is shown "
                             "only when this is given")
    parser.add_argument(
        "--group-by", choices=("none", "frequency", "series"), default="none",
        help="fit one calibration per bar frequency (1d, 1h, ...) or per series, all in the one "
        "file; each applies only to its group (default: one for all the series)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("calibration.json"), help="calibration JSON to write"
    )


def levels_from(args) -> tuple[float, ...]:
    """Central levels to calibrate: --coverage plus those implied by --quantiles."""
    implied = {round(abs(2 * q - 1), 10) for q in args.quantiles if abs(q - 0.5) > 1e-12}
    return tuple(sorted(set(args.coverage) | implied))


def split_times(series, fraction: float) -> list:
    """Per series, the time where its last ``fraction`` of rows begins."""
    return [s.timestamps[int(len(s) * (1 - fraction))] for s in series]


def _covered(name, cal, samples, truth, issued, resolved) -> dict[str, np.ndarray]:
    """Columns of the held-out table for one calibration: {label: covered (C, N, H)} on the
    close."""
    from kronos_core.eval.evaluate import CLOSE
    from kronos_core.eval.metrics import covered

    close = samples[..., CLOSE].astype(np.float64)  # (N, S, H)
    y = truth[..., CLOSE].astype(np.float64)  # (N, H)
    static = []
    for c in cal.levels:
        q = cal.quantiles(close, [(1 - c) / 2, (1 + c) / 2], "close")
        static.append(covered(q[0], q[1], y))
    out = {name: np.stack(static)}
    if cal.state is not None:  # ACI: the walk continued through these windows, in time order
        j = cal.features.index("close")
        corr = cal.walk(samples, truth, issued, resolved)  # (N, C, H, F)
        sc = cal.scores(samples, truth)  # (N, C, H, F)
        out[f"{name} online"] = (sc[..., j] <= corr[..., j]).astype(np.float64).transpose(1, 0, 2)
    return out


def holdout_starts(args, series) -> list:
    """Per series, where its held-out part begins: the corpus's ``eval_from`` or ``--eval-from``
    (``args.eval_from``, set by ``run``), else the start of its last ``--holdout`` fraction."""
    eval_from = getattr(args, "eval_from", None)
    if eval_from is not None:
        return [eval_from[s.name] for s in series]
    return split_times(series, args.holdout)


def holdout_report(args, predictor, series, cals: dict) -> list[dict]:
    """Coverage before and after each calibration on each series' held-out last part (windows in
    time order, so ACI walks through them), and over all of them."""
    from kronos_core.calibration.conformal import series_frequency
    from kronos_core.eval.evaluate import CLOSE
    from kronos_core.eval.runner import walk_forward, window_times

    levels = next(iter(cals.values())).levels
    rows: list[dict] = []
    pooled: dict[str, list[np.ndarray]] = {}  # column -> its (C, N) array of each series
    for s, t in zip(series, holdout_starts(args, series)):
        wf = walk_forward(
            args, predictor, [s], start=t, windows=args.holdout_windows or args.windows
        )
        issued, resolved = window_times(wf)
        truth = wf.windows.truth
        lv = [q for c in levels for q in ((1 - c) / 2, (1 + c) / 2)]
        raw = np.quantile(wf.paths[..., CLOSE].astype(np.float64), lv, axis=1)  # (2C, N, H)
        y = truth[..., CLOSE].astype(np.float64)
        cols = {
            "before": np.stack(
                [(raw[2 * i] <= y) & (y <= raw[2 * i + 1]) for i in range(len(levels))]
            ).astype(np.float64)
        }
        for name, cal in cals.items():
            member = cal.select(series_frequency(s.timestamps), s.name)  # the group of this series
            cols.update(_covered(name, member, wf.paths, truth, issued, resolved))
        rows += _rows(s.name, levels, cols)
        for k, v in cols.items():
            pooled.setdefault(k, []).append(v)
    if len(series) > 1:
        rows += _rows("all", levels, {k: np.concatenate(v, axis=1) for k, v in pooled.items()})
    return rows


def _rows(name, levels, cols) -> list[dict]:
    n = next(iter(cols.values())).shape[1]
    return [
        {
            "series": name, "level": c, "windows": n,
            **{k: float(v[ci].mean()) for k, v in cols.items()},
        }
        for ci, c in enumerate(levels)
    ]


def group_series(series, group_by: str) -> dict[str | None, list]:
    """{group name: its series} for ``--group-by`` (``none``: one group, named None)."""
    from kronos_core.calibration.conformal import series_frequency

    if group_by == "none":
        return {None: list(series)}
    groups: dict[str | None, list] = {}
    for s in series:
        key = s.name if group_by == "series" else series_frequency(s.timestamps)
        if key is None:
            raise ValueError(
                f"{s.name}: cannot tell its bar frequency (too few rows) for --group-by frequency"
            )
        groups.setdefault(key, []).append(s)
    return groups


def _fit_group(args, predictor, series) -> tuple[dict, int, float]:
    """The --method calibration and the --compare ones of one group, on the same windows, each
    with the scope it was fitted on (lookback, bar frequencies, series)."""
    from kronos_core.calibration.conformal import Calibration, Scope, series_frequency
    from kronos_core.eval.runner import walk_forward, window_times

    if args.holdout is not None or getattr(args, "eval_from", None) is not None:
        # calibration windows end where each series' held-out part (corpus: eval period) begins
        wfs = [walk_forward(args, predictor, [s], start=args.start, end=t)
               for s, t in zip(series, holdout_starts(args, series))]
    else:
        wfs = [walk_forward(args, predictor, series, start=args.start, end=args.end)]
    paths = np.concatenate([w.paths for w in wfs])
    truth = np.concatenate([w.windows.truth for w in wfs])
    times = [window_times(w) for w in wfs]
    issued, resolved = np.concatenate([t[0] for t in times]), np.concatenate([t[1] for t in times])
    n_windows, seconds = len(truth), sum(w.seconds for w in wfs)
    from kronos_core.eval.runner import sampling_for

    sampling = sampling_for(args, predictor)
    info = {"windows": n_windows, "lookback": args.lookback, "sampling": sampling.as_dict(),
            "sample_count": sampling.sample_count,
            "seed": args.seed, "step": args.step or args.horizon, "holdout": args.holdout,
            "series": [s.name for s in series], "start": args.start, "end": args.end}
    if getattr(args, "eval_from", None) is not None:
        if args.corpus is not None:
            info["fitted_before"] = "each series' eval_from (corpus evaluation period)"
            info["corpus"] = str(args.corpus)
        else:
            info["fitted_before"] = "each series' --eval-from"
            info["eval_from"] = {k: str(v) for k, v in args.eval_from.items()}
    frequencies = {f for s in series if (f := series_frequency(s.timestamps)) is not None}
    scope = Scope(
        (args.lookback, args.lookback), tuple(sorted(frequencies)) or None,
        tuple(s.name for s in series),
    )
    cals = {}
    for m in dict.fromkeys((args.method, *args.compare)):
        cal = Calibration.fit(
            paths, truth, levels_from(args), predictor.identity.as_dict(), m, info=info,
            issued=issued, resolved=resolved, scope=scope,
        )
        cals[m] = cal
    return cals, n_windows, seconds


def _label(asked: str, cal) -> str:
    return asked if asked == cal.method else f"{asked} ({cal.method})"


def fit_calibrations(args, predictor, series) -> tuple[dict, int, float]:
    """The --method calibration and the --compare ones, all on the same calibration windows;
    with ``--group-by``, each one file of one member per group."""
    from kronos_core.calibration.conformal import Calibration

    groups = group_series(series, getattr(args, "group_by", "none"))
    fitted = {key: _fit_group(args, predictor, members) for key, members in groups.items()}
    n_windows, seconds = sum(f[1] for f in fitted.values()), sum(f[2] for f in fitted.values())
    if list(groups) == [None]:
        return {_label(m, cal): cal for m, cal in fitted[None][0].items()}, n_windows, seconds
    cals = {}
    for asked in next(iter(fitted.values()))[0]:
        # cast: past the one unnamed group (returned above), every group has a name
        cal = Calibration.grouped(
            {cast(str, key): f[0][asked] for key, f in fitted.items()}, args.group_by
        )
        cals[_label(asked, cal)] = cal
    return cals, n_windows, seconds


def run(args) -> int:
    from kronos_core.calibration.conformal import METHODS, CalibrationError
    from kronos_core.eval.data import DataError
    from kronos_core.eval.sources import load_source
    from kronos_core.loading import load_predictor, predictor_config_from_args
    from kronos_core.model import CheckpointError

    if args.holdout is not None and not 0 < args.holdout < 1:
        print("kronos calibrate: --holdout must be a fraction in (0, 1)", file=sys.stderr)
        return 2
    unknown = [m for m in args.compare if m not in METHODS]
    if unknown:
        print(
            f"kronos calibrate: --compare {','.join(unknown)}: not a method ({', '.join(METHODS)})",
            file=sys.stderr,
        )
        return 2
    if args.corpus is not None and args.holdout is not None:
        print("kronos calibrate: --holdout is for files; a corpus's hold-out is each series' "
              "evaluation period (give --holdout-windows N for the held-out coverage table)",
              file=sys.stderr)
        return 2
    try:
        source = load_source(args)
        series = source.series
        if any(i.eval_from is not None for i in source.info):
            # corpus or --eval-from: fit on windows before eval_from, never on eval rows
            args.eval_from = {s.name: i.eval_from for s, i in zip(series, source.info)}
        predictor = load_predictor(predictor_config_from_args(args))
        cals, n_windows, seconds = fit_calibrations(args, predictor, series)
    except (DataError, CalibrationError, CheckpointError, ValueError) as exc:
        print(f"kronos calibrate: {exc}", file=sys.stderr)
        return 2
    cal = next(iter(cals.values()))
    cal.save(args.out)
    if cal.members:
        print(f"one calibration per {cal.group_by}: {', '.join(cal.members)}")
        cal = next(iter(cal.members.values()))  # the details below: of the first group
    detail = ""
    if "selection" in cal.info:
        detail = f" (select chose {cal.info['selection']['chosen']})"
    if "aci" in cal.info:
        detail = (
            f" (gamma {cal.info['aci']['gamma']:g}, trailing window {cal.info['aci']['window']})"
        )
    print(
        f"fitted {cal.method}{detail} on {n_windows} windows ({n_windows / seconds:.2f} windows/s) "
        f"for model {predictor.identity.name}; wrote {args.out}"
    )
    corpus_holdout = source.corpus is not None and args.holdout_windows
    if args.holdout is not None or corpus_holdout:
        rows = holdout_report(args, predictor, series, cals)
        cols = [k for k in rows[0] if k not in ("series", "level", "windows")]
        print("\nheld-out coverage (close), before and after each calibration:\n")
        print("| series | level | held-out windows | " + " | ".join(cols) + " |")
        print("|---|---|---|" + "---|" * len(cols))
        for r in rows:
            print(f"| {r['series']} | {r['level']:g} | {r['windows']} | "
                  + " | ".join(f"{100 * r[c]:.1f}%" for c in cols) + " |")
    return 0
