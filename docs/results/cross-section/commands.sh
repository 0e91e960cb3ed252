# The commands behind docs/results/cross-section (2026-12-07, the bundled kronos-default;
# ../shared/data/corpus; the 2-core CPU, shared with a training run and other work). Run from the
# repository root with the corpus beside it. Run with the price limits in (the shipped default's
# behaviour since issue 55), before the move correction was merged: a common lambda > 0 leaves
# the ranking as it is. Times: 25.3 min (3,650 windows, load 6-12) and 5.1 min (1,975 windows,
# load ~2).
set -euo pipefail
C=../shared/data/corpus
OUT=${OUT:-docs/results/cross-section}
# the 141 held-out A-shares (never trained on): every 15 trading days from 2019-01-30
kronos eval --cross-section --corpus $C --split holdout_instrument --market CN --frequency 1d \
  --lookback 224 --horizon 1 5 --every 15 --batch-size 64 --seed 0 \
  --paths-cache runs/paths-cache --out "$OUT/holdout-instrument.json" --plot "$OUT/plots"
# (the committed PNGs are these with an instrument- / time- prefix; the .factor_data.parquet files
# are not committed: per-stock forward returns of corpus rows stay in ../shared)
# the time hold-out: 100 of the 804 train A-shares (the first by SHA-256 of the symbol), scored
# from 2019-01-30 on, every 20 trading days (the CPU time allowed no more)
kronos eval --cross-section --corpus $C --split train --market CN --frequency 1d \
  --max-series-per-group 100 --lookback 224 --horizon 1 5 --every 20 --batch-size 64 --seed 0 \
  --paths-cache runs/paths-cache --out "$OUT/holdout-time.json" --plot "$OUT/plots-time"
