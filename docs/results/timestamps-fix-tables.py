"""Before/after table of the crypto and FX groups (uncalibrated and calibrated model) from two
`kronos eval` reports: MASE and its ratio to the last value, scaled CRPS and its ratio to the
historical-volatility band, 90% coverage."""
import json
import sys

MODEL = "kronos-default"
CAL = "kronos-default + cqr calibration"


def groups(path):
    rep = json.load(open(path))
    out = {}
    for h, rows in rep["groups"]["horizons"].items():
        for g in rows:
            out[(h, g["holdout"], g["market"], g["frequency"])] = g
    return out


before, after = groups(sys.argv[1]), groups(sys.argv[2])
print("| h | hold-out | market | freq | series | windows | MASE before | MASE after | "
      "MASE / last value before | after | sCRPS before | sCRPS after | sCRPS / hist-vol before "
      "| after | cov 90% before | after | calibrated sCRPS before | after |")
print("|" + "---|" * 18)
for key in sorted(before, key=lambda k: (k[0], k[1], k[2], k[3])):
    b, a = before[key], after.get(key)
    if a is None:
        continue
    fb, fa = b["forecasters"], a["forecasters"]

    def f(x):
        return f"{x:.3f}"

    cells = [key[0], key[1], key[2], key[3], str(b["series"]), str(b["windows"]),
             f(fb[MODEL]["mase"]), f(fa[MODEL]["mase"]),
             f(fb[MODEL]["mase"] / fb["last_value"]["mase"]),
             f(fa[MODEL]["mase"] / fa["last_value"]["mase"]),
             f(fb[MODEL]["crps_scaled"]), f(fa[MODEL]["crps_scaled"]),
             f(fb[MODEL]["crps_scaled"] / fb["hist_vol"]["crps_scaled"]),
             f(fa[MODEL]["crps_scaled"] / fa["hist_vol"]["crps_scaled"]),
             f"{100 * fb[MODEL]['coverage']['0.9']:.0f}%",
             f"{100 * fa[MODEL]['coverage']['0.9']:.0f}%",
             f(fb[CAL]["crps_scaled"]) if CAL in fb else "-",
             f(fa[CAL]["crps_scaled"]) if CAL in fa else "-"]
    print("| " + " | ".join(cells) + " |")
