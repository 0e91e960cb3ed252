# The commands behind docs/results/corpus-eval (2026-12-02, bundled kronos-default, ../shared/data/corpus)
# kronos calibrate --corpus /work/shared/data/corpus --max-series-per-group 20 --windows 8 --lookback 251 --horizon 5 --sample-count 32 --seed 0 --group-by frequency --out calibration.json
set -x
cd /work/main; export PYTHONPATH=/work/main
time /work/main/.venv/bin/kronos eval --corpus /work/shared/data/corpus --max-series-per-group 20 --windows 8 --lookback 251 --horizon 1 5 --batch-size 24 --sample-count 32 --seed 0 --calibration /work/runs/eval/calibration.json --out /work/runs/eval/report.json > /work/runs/eval/eval.log 2>&1
