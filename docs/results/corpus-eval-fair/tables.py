"""Tables of docs/results/corpus-eval-fair: the same windows, paths and seeds as
docs/results/corpus-eval (2026-12-05), scored with the plug-in CRPS then and the fair one now.

    python docs/results/corpus-eval-fair/tables.py > docs/results/corpus-eval-fair/tables.md
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from report_tables import fmt as _f  # noqa: E402
from report_tables import group_rows as _rows  # noqa: E402
from report_tables import load as _load  # noqa: E402

BEFORE = HERE.parent / "corpus-eval" / "report.json.gz"
AFTER = HERE / "report.json.gz"
MODEL = "kronos-default"
CALIBRATED = "kronos-default + cqr calibration"


def _p(test: dict) -> str:
    p = test.get("p_value")
    return "—" if p is None else "< 0.001" if p < 1e-3 else f"{p:.3f}"


def main() -> None:
    before, after = _load(BEFORE), _load(AFTER)
    print("| hold-out | group | h | windows | MASE / last value (same paths) | CRPS / band, "
          "plug-in (before) | CRPS / band, fair (now) | p | CRPS / GARCH, plug-in | "
          "CRPS / GARCH, fair | calibrated CRPS / band, plug-in | calibrated, fair |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for h in ("1", "5"):
        b_rows, a_rows = _rows(before, h), _rows(after, h)
        for key in a_rows:
            if key[1] not in ("all", "CN") or (key[1] == "CN" and key[2] != "1d"):
                continue
            a, b = a_rows[key], b_rows[key]
            am, bm = a["models"][MODEL], b["models"][MODEL]
            ac, bc = a["models"][CALIBRATED], b["models"][CALIBRATED]
            assert a["windows"] == b["windows"]
            group = "all" if key[1] == "all" else f"{key[1]}/{key[2]}"
            print(f"| {key[0]} | {group} | {h} | {a['windows']} | "
                  f"{_f(am['mase_vs_last_value']['ratio'])} "
                  f"({_f(bm['mase_vs_last_value']['ratio'])}) | "
                  f"{_f(bm['crps_vs_hist_vol']['ratio'])} | "
                  f"**{_f(am['crps_vs_hist_vol']['ratio'])}** | "
                  f"{_p(am['tests']['hist_vol']['crps'])} | "
                  f"{_f(bm['crps_vs_garch']['ratio'])} | {_f(am['crps_vs_garch']['ratio'])} | "
                  f"{_f(bc['crps_vs_hist_vol']['ratio'])} | "
                  f"{_f(ac['crps_vs_hist_vol']['ratio'])} |")
    print()
    print("Volatility skill (fair run; the last step of each horizon):")
    print()
    print("| hold-out | group | h | windows | forecaster | spread rank corr with realised "
          "\\|ret\\| | forecast \\|ret\\| / realised |")
    print("|---|---|---|---|---|---|---|")
    for h in ("1", "5"):
        for key, a in _rows(after, h).items():
            if key[1] not in ("all", "CN") or (key[1] == "CN" and key[2] != "1d"):
                continue
            group = "all" if key[1] == "all" else f"{key[1]}/{key[2]}"
            for name in (MODEL, CALIBRATED, "hist_vol", "garch"):
                v = a["forecasters"][name].get("volatility") or {}
                print(f"| {key[0]} | {group} | {h} | {a['windows']} | {name} | "
                      f"{_f(v.get('spread_rank_corr'))} | {_f(v.get('abs_return_ratio'))} |")


if __name__ == "__main__":
    main()
