"""The engine's time on one workload under two versions of the code, in one run (issue 53).

Checks the base commit out into a temporary git worktree, then runs the same in-process
forecast (the bundled default model on the sample store's first ``--symbols`` symbols, the
model's own paths, seeded) under each version alternately, ``--rounds`` times, each in a fresh
interpreter with one torch thread, and prints the CPU seconds of each run, the ratio
before / after of the medians, and how far the two versions' forecasts are apart. CPU time of
one thread is what a loaded machine inflates least; the wall time is printed beside it.

    .venv/bin/python scripts/engine-before-after.py 23c5e09 --symbols 64 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# run in a fresh interpreter with the version's tree first on sys.path
CHILD = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from kronos_core.base.options import ForecastOptions
from kronos_core.loading import PredictorConfig, load_predictor
import kronos_core
try:
    from kronos_core.data.portfolio_windows import sample_store_windows
except ImportError:  # commits 23c5e09 to f633794 held it in kronos_core.plan.portfolio
    from kronos_core.plan.portfolio import sample_store_windows
symbols, lookback, horizon, per_call = (int(a) for a in sys.argv[1:5])
predictor = load_predictor(PredictorConfig())
paths = predictor.sampling.sample_count
options = ForecastOptions(horizon, sample_count=paths, seed=0).with_defaults(predictor.sampling)
windows = sample_store_windows(symbols, lookback, horizon)
def run(part_list):
    out = []
    for part in part_list:
        out.append(predictor.forecast(part.values, part.x_stamps, part.y_stamps, options).paths)
    return out
parts = [windows.chunk(i, i + per_call) for i in range(0, len(windows), per_call)]
run(parts[:1])  # warm-up
c0, w0 = time.process_time(), time.perf_counter()
paths_out = run(parts)
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
np.save(sys.argv[6], np.concatenate(paths_out))
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "paths": paths, "code": kronos_core.__file__}))
"""


def run_version(tree: Path, args, out: Path) -> dict:
    # the version's own kronos_core first (the base must have the portfolio workload: commit
    # 23c5e09 or later)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", CHILD, str(args.symbols), str(args.lookback), str(args.horizon),
           str(args.series_per_call), str(ROOT), str(out)]
    # run in the version's tree: ``-c`` puts the working directory first on sys.path
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the commit to compare against (before)")
    ap.add_argument("--symbols", type=int, default=64)
    ap.add_argument("--lookback", type=int, default=251)
    ap.add_argument("--horizon", type=int, default=5)
    ap.add_argument("--series-per-call", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="kronos-before-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base),
                        args.base], check=True, capture_output=True)
        try:
            runs: dict[str, list[dict]] = {"before": [], "after": []}
            for r in range(args.rounds):
                for name, tree in (("before", base), ("after", ROOT)):
                    res = run_version(tree, args, Path(tmp) / f"{name}.npy")
                    runs[name].append(res)
                    print(f"round {r + 1} {name:<6} cpu {res['cpu_s']:7.2f} s  wall "
                          f"{res['wall_s']:7.2f} s  ({res['code']})", flush=True)
            before = np.load(Path(tmp) / "before.npy")
            after = np.load(Path(tmp) / "after.npy")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                           check=False, capture_output=True)
    med = {k: statistics.median(x["cpu_s"] for x in v) for k, v in runs.items()}
    med_wall = {k: statistics.median(x["wall_s"] for x in v) for k, v in runs.items()}
    diff = np.abs(before - after)
    rel = float(np.max(diff / (np.abs(before) + 1e-9)))
    same_share = float(np.mean(np.all(np.isclose(before, after, rtol=1e-5, atol=1e-6),
                                      axis=(-2, -1))))
    paths = runs["after"][0]["paths"]
    print(f"{args.symbols} symbols x {paths} paths, lookback {args.lookback}, horizon "
          f"{args.horizon}, {args.series_per_call} series a call, 1 thread")
    print(f"median CPU: before {med['before']:.2f} s, after {med['after']:.2f} s: "
          f"before / after = {med['before'] / med['after']:.2f}x "
          f"({med['after'] / args.symbols * 1e3:.1f} ms a symbol after)")
    print(f"median wall (loaded machine): before {med_wall['before']:.2f} s, after "
          f"{med_wall['after']:.2f} s")
    print(f"forecast paths: max relative difference {rel:.2e}; paths equal to 1e-5: "
          f"{same_share:.1%}")
    if args.json:
        args.json.write_text(json.dumps({
            "base": args.base, "symbols": args.symbols, "lookback": args.lookback,
            "horizon": args.horizon, "series_per_call": args.series_per_call, "runs": runs,
            "median_cpu_s": med, "median_wall_s": med_wall,
            "ratio": med["before"] / med["after"], "max_rel_diff": rel,
            "paths_equal_share": same_share,
        }, indent=2))


if __name__ == "__main__":
    main()
