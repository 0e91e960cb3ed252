# docs/results/corpus-eval-fair (2026-12-07): the corpus evaluation of docs/results/corpus-eval
# re-run with the fair ensemble CRPS (issue 54): the same model, windows, seeds and calibration, so
# the same paths (the MASE columns agree to the last digit); only the CRPS estimator differs. Run
# from the repository root with the corpus beside it; 17.6 min on the 2-core CPU, shared with a
# training run and other work. Price limits were not yet in the code (they change A-share paths).
set -euo pipefail
C=../shared/data/corpus
M=kronos_core/assets/models/kronos-default
OUT=${OUT:-runs/corpus-eval-fair}
kronos eval --corpus $C --max-series-per-group 20 --windows 8 --lookback 251 --horizon 1 5 \
  --batch-size 64 --seed 0 --model $M --calibration docs/results/corpus-eval/calibration.json \
  --no-price-limits --out "$OUT/report.json"   # writes report.md beside it
python docs/results/corpus-eval-fair/tables.py > docs/results/corpus-eval-fair/tables.md
