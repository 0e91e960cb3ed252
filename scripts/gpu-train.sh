#!/usr/bin/env bash
# scripts/gpu-train.sh OUT [EXTRACT] [gpu_train.py flags: --device, --max-steps, --minutes, ...]
#
# Trains on a lent GPU machine from a corpus extract (a folder with instruments.csv and Parquet
# files, training rows only: scripts/make-corpus-extract.py writes one) and writes the
# checkpoint and its figures under OUT: checkpoint/{model,tokenizer}/, checkpoint/kronos.json,
# metrics.jsonl, summary.json (losses, steps/s, windows/s, wall time). EXTRACT is the second
# argument or $KRONOS_CORPUS_EXTRACT (default: .corpus-extract in the repository). Its
# train.json (a training config as JSON) sets the run; flags override it.
#
# Needs only torch, numpy, pandas, pyarrow and safetensors (never imports pydantic, yaml, tqdm,
# Ray or the service). PYTHON picks the interpreter (default: python3). The CPU dry run
# (--device cpu --tiny) is in the test suite: tests/train/test_gpu_train.py.
set -euo pipefail

if [[ $# -lt 1 || $1 == -* ]]; then
    echo "usage: $0 OUT [EXTRACT] [--device cpu|cuda|auto] [--max-steps N] [--minutes M]" \
        "[--tiny] [--kind tokenizer|predictor] [--tokenizer DIR] [--init DIR]" >&2
    exit 2
fi
OUT=$1
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EXTRACT=${KRONOS_CORPUS_EXTRACT:-$ROOT/.corpus-extract}
if [[ $# -ge 1 && $1 != -* ]]; then
    EXTRACT=$1
    shift
fi
if [[ ! -f $EXTRACT/instruments.csv ]]; then
    echo "gpu-train: no corpus extract at $EXTRACT (instruments.csv missing); write one with" >&2
    echo "  python scripts/make-corpus-extract.py --out $EXTRACT" >&2
    exit 2
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
mkdir -p "$OUT"
"$PY" "$ROOT/scripts/gpu_train.py" "$OUT" --extract "$EXTRACT" "$@"
