set -euo pipefail
C=../shared/data/corpus
.venv/bin/kronos tune-moves --corpus $C --split train --max-series-per-group 20 --windows 24 --step 63 \
  --lookback 251 --horizon 5 --model runs/candidate-c2 --batch-size 64 \
  --json runs/candidate-c2-tune-moves.json --write runs/candidate-c2
.venv/bin/kronos eval --corpus $C --max-series-per-group 20 --windows 8 --lookback 251 --horizon 1 5 \
  --batch-size 64 --seed 0 --model kronos_core/assets/models/kronos-default \
  --model runs/candidate-c2 --out runs/corpus-eval-c2/report.json
