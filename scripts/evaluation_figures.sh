#!/usr/bin/env bash
# The figures of docs/evaluation.md for one model: coverage before/after calibration on
# held-out windows (the three bundled real series and the A-share 5-minute file of the shared
# folder, ../shared/data or $KRONOS_SHARED_DIR/data, never committed; ACI as the file's method,
# CQR, width-scaled CQR and the nested selection as comparison columns, all fitted on the same
# windows), and
# the eval tables against the baselines. Sample paths are kept in $OUT/paths-cache, so a
# rerun (e.g. with other --compare methods) does not forecast again.
#   MODEL_ARGS="--model path/to/bundle" OUT=eval-figures bash scripts/evaluation_figures.sh
# Calibration windows: origins in the last 30% of each series, truths before its last 15%;
# held-out windows: origins in the last 15% (the part the bundled default was not trained on).
set -euo pipefail
OUT=${OUT:-eval-figures}
MODEL_ARGS=${MODEL_ARGS:-}
REAL=kronos_core/data/real
SHARED_DATA=${KRONOS_SHARED_DIR:-../shared}/data
A_SHARE="$SHARED_DATA/kline_5min_a_share.csv"
if [ ! -f "$A_SHARE" ]; then
  echo "needs $A_SHARE (the A-share 5-minute file of the shared folder; set KRONOS_SHARED_DIR)" >&2
  exit 2
fi
FILES=("$REAL/goog_daily.csv" "$REAL/sp500_daily.csv" "$A_SHARE" "$REAL/eurusd_hourly.csv")
mkdir -p "$OUT"
for f in "${FILES[@]}"; do
  s=$(basename "$f" .csv)
  python -m kronos_core.cli calibrate $MODEL_ARGS --data "$f" --lookback 128 --horizon 5 --step 2 \
    --windows 150 --sample-count 16 --last-fraction 0.3 --holdout 0.15 --method aci --compare cqr,cqr-r,select \
    --paths-cache "$OUT/paths-cache" --out "$OUT/calibration_$s.json" | tee "$OUT/calibration_$s.md"
done
python -m kronos_core.cli eval $MODEL_ARGS --data "${FILES[@]}" --lookback 128 --horizon 5 --step 5 \
  --windows 40 --sample-count 16 --last-fraction 0.15 --out "$OUT/eval.json" --plot "$OUT/plots" \
  | tee "$OUT/eval.md"
