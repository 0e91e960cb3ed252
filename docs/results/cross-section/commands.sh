# The commands behind docs/results/cross-section (2026-12-07, the bundled kronos-default;
# ../shared/data/corpus; the 2-core CPU, shared with a training run and other work). Run from the
# repository root with the corpus beside it.
set -euo pipefail
C=../shared/data/corpus
OUT=${OUT:-docs/results/cross-section}
# the 141 held-out A-shares (never trained on): every 15 trading days from 2019-01-30
kronos eval --cross-section --corpus $C --split holdout_instrument --market CN --frequency 1d \
  --lookback 224 --horizon 1 5 --every 15 --batch-size 64 --seed 0 \
  --paths-cache runs/paths-cache --out "$OUT/holdout-instrument.json" --plot "$OUT/plots"
# the time hold-out: 100 of the 804 train A-shares (the first by SHA-256 of the symbol), scored
# from 2019-01-30 on, every 20 trading days (the CPU time allowed no more)
kronos eval --cross-section --corpus $C --split train --market CN --frequency 1d \
  --max-series-per-group 100 --lookback 224 --horizon 1 5 --every 20 --batch-size 64 --seed 0 \
  --paths-cache runs/paths-cache --out "$OUT/holdout-time.json" --plot "$OUT/plots-time"
