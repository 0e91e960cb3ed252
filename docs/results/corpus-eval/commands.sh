# The commands behind docs/results/corpus-eval (2026-12-05, the bundled kronos-default trained on
# the whole corpus with the A-share part; ../shared/data/corpus, 2-core CPU). Run from the
# repository root with the corpus beside it. The 2026-12-02 default's run: ../corpus-eval-2026-12-02.
set -euo pipefail
C=../shared/data/corpus
M=kronos_core/assets/models/kronos-default
OUT=${OUT:-runs/corpus-eval}
mkdir -p "$OUT"
# 1. train (77 min here; two sittings: the second with --resume)
# kronos train default --corpus $C --out $M --minutes 115
# 2. sampling settings on validation windows (train instruments, windows ending before eval_from;
#    6 + 2 settings x 152 windows, 12 min): writes the 'sampling' block of $M/kronos.json
kronos tune-sampling --corpus $C --split train --max-series-per-group 20 --windows 2 \
  --lookback 251 --horizon 1 5 --seed 0 --batch-size 64 --temperatures 0.8,0.9,1.0 \
  --top-ps 0.9,1.0 --model $M --write $M --json "$OUT/tune-sampling.json"
kronos tune-sampling --corpus $C --split train --max-series-per-group 20 --windows 2 \
  --lookback 251 --horizon 1 5 --seed 0 --batch-size 64 --temperatures 0.6,0.7 \
  --top-ps 1.0 --model $M --json "$OUT/tune-sampling-lower-temperatures.json"
# 2b. move correction (lambda, kappa per step) on 456 training-period windows (4 min on a CPU);
# docs/model-card.md "Move correction"
kronos tune-moves --corpus $C --split train --max-series-per-group 20 --windows 6 --step 42 \
  --lookback 251 --horizon 5 --seed 0 --batch-size 64 --model $M --write $M \
  --json "$OUT/tune-moves.json"
# 3. calibration (CQR per bar frequency) on the same kind of windows (1 min)
kronos calibrate --corpus $C --split train --max-series-per-group 20 --windows 2 --lookback 251 \
  --horizon 5 --seed 0 --batch-size 64 --group-by frequency --model $M \
  --out "$OUT/calibration.json"
# 4. both hold-outs, at most 20 series per (market, frequency, hold-out): CN daily has 20 of each
#    (10 min)
kronos eval --corpus $C --max-series-per-group 20 --windows 8 --lookback 251 --horizon 1 5 \
  --batch-size 64 --seed 0 --model $M --calibration "$OUT/calibration.json" \
  --out "$OUT/report.json" > "$OUT/report.md"
