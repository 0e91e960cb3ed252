"""The goals' table of issue 55 for the continued default (docs/model-card.md), from the JSON in
this folder and the earlier runs it is compared with:

* ``before, raw``: the shipped default's weights as sampled (docs/results/corpus-eval-fair, the
  fair CRPS; docs/results/cross-section, price limits in, no move correction);
* ``before``: the same weights with the layers they shipped with on 2026-12-07 (price limits and
  their move correction; this folder's report, model ``kronos-default``);
* ``continued, last-year moves``: the continued weights with a move correction fitted as the
  shipped one was (456 windows, the last year before each ``eval_from``; model
  ``kronos-default-continued``);
* ``after``: what ships, the continued weights with the move correction fitted on 1,534 windows
  over six years before each ``eval_from`` (model ``kronos-default-continued-longmoves``;
  cross-section/ here), price limits in.

    python docs/results/default-continued/tables.py > docs/results/default-continued/tables.md
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from report_tables import fmt as _f  # noqa: E402
from report_tables import group_rows as _rows  # noqa: E402
from report_tables import load as _load  # noqa: E402

RESULTS = HERE.parent
RAW = RESULTS / "corpus-eval-fair" / "report.json.gz"
NOW = HERE / "report.json.gz"
CS_BEFORE = RESULTS / "cross-section"
CS_AFTER = HERE / "cross-section"
BEFORE, LAST_YEAR, AFTER = ("kronos-default", "kronos-default-continued",
                             "kronos-default-continued-longmoves")
HOLDOUTS = {"time": "holdout-time.json", "instrument": "holdout-instrument.json"}
MIN_GROUP = 80  # goal 6: groups of at least this many windows
ALPHA = 0.05


def _ic(m: dict, key: str = "rank_ic") -> str:
    return f"{m[key]:.3f} ({m[key + '_t']:.2f})"


def _model_cells(row: dict, name: str) -> list[str]:
    m, f = row["models"][name], row["forecasters"][name]
    return [_f(m["crps_vs_hist_vol"]["ratio"]), _f(m["crps_vs_garch"]["ratio"]),
            _f(m["mase_vs_last_value"]["ratio"]), _f(f["volatility"]["abs_return_ratio"])]


def goals_table(raw: dict, now: dict) -> list[str]:
    lines = [
        "| CN daily hold-out | h | windows | model | 1. CRPS / band | 1. CRPS / GARCH-t | "
        "2. MASE / last value | 3. forecast \\|ret\\| / realised |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for holdout in HOLDOUTS:
        for h in ("1", "5"):
            key = (holdout, "CN", "1d")
            r_raw, r_now = _rows(raw, h)[key], _rows(now, h)[key]
            assert r_raw["windows"] == r_now["windows"]
            for label, row, name in (("before, raw", r_raw, BEFORE), ("before", r_now, BEFORE),
                                     ("continued, last-year moves", r_now, LAST_YEAR),
                                     ("**after**", r_now, AFTER)):
                lines.append(f"| {holdout} | {h} | {row['windows']} | {label} | "
                             + " | ".join(_model_cells(row, name)) + " |")
    return lines


def volatility_table(now: dict) -> list[str]:
    """The volatility rows of what ships (and the baselines) on both CN-daily hold-outs."""
    lines = [
        "| CN daily hold-out | h | windows | forecaster | spread rank corr with realised "
        "\\|ret\\| | forecast \\|ret\\| / realised |",
        "|---|---|---|---|---|---|",
    ]
    for holdout in HOLDOUTS:
        for h in ("1", "5"):
            row = _rows(now, h)[(holdout, "CN", "1d")]
            for name, label in ((AFTER, "**kronos-default (shipped)**"),
                                (BEFORE, "kronos-default before"), ("hist_vol", "band"),
                                ("garch", "GARCH-t")):
                v = row["forecasters"][name]["volatility"]
                lines.append(f"| {holdout} | {h} | {row['windows']} | {label} | "
                             f"{_f(v['spread_rank_corr'])} | {_f(v['abs_return_ratio'])} |")
    return lines


def cross_section_table() -> list[str]:
    lines = [
        "| CN daily hold-out | dates | model | 4. RankIC h 5 (t) | 4. RankIC h 1 (t) | "
        "4. after 5-day reversal, h 5 (t) | 5. top decile, 10 bps: annual return − universe's, "
        "h 5 | reversal's RankIC h 5 (t) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for holdout, file in HOLDOUTS.items():
        for label, folder in (("before", CS_BEFORE), ("**after**", CS_AFTER)):
            cs = _load(folder / file)["cross_section"]
            h5, h1 = cs["horizons"]["5"], cs["horizons"]["1"]
            m5 = h5["model"]
            lines.append(
                f"| {holdout} | {m5['dates']} | {label} | {_ic(m5)} | {_ic(h1['model'])} | "
                f"{m5['rank_ic_after_reversal_5d']:.3f} "
                f"({m5['rank_ic_after_reversal_5d_t']:.2f}) | "
                f"{m5['portfolio']['annual_excess_return']:+.3f} | "
                f"{_ic(h5['reversal_5d'])} |")
    return lines


def worse_groups(now: dict) -> list[str]:
    """Goal 6: the groups of at least MIN_GROUP windows where the continued model's CRPS or
    absolute error is significantly worse (two-sided p < ALPHA, mean difference > 0)."""
    lines = [
        "| h | hold-out | group | windows | CRPS before − after (scaled) | p | "
        "\\|err\\| before − after | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worse = 0
    for h in ("1", "5"):
        for (holdout, market, freq), row in _rows(now, h).items():
            if row["windows"] < MIN_GROUP:
                continue
            t = row["models"][BEFORE]["tests"][AFTER]
            c, e = t["crps"], t["abs_error"]
            for test in (c, e):
                worse += int(test["p_value"] < ALPHA and test["mean_difference"] < 0)
            group = "all" if market == "all" else f"{market}/{freq}"
            lines.append(f"| {h} | {holdout} | {group} | {row['windows']} | "
                         f"{c['mean_difference']:+.4f} | {c['p_value']:.3f} | "
                         f"{e['mean_difference']:+.4f} | {e['p_value']:.3f} |")
    lines.append("")
    lines.append(f"Groups of {MIN_GROUP}+ windows where the continued default is significantly "
                 f"worse (p < {ALPHA}): **{worse}**. (A positive difference: the continued "
                 "default's loss is lower.)")
    return lines


def main() -> None:
    raw, now = _load(RAW), _load(NOW)
    print("\n".join(goals_table(raw, now)))
    print()
    print("\n".join(volatility_table(now)))
    print()
    print("\n".join(cross_section_table()))
    print()
    print("\n".join(worse_groups(now)))


if __name__ == "__main__":
    main()
