#!/usr/bin/env bash
# scripts/gpu-check.sh OUT [--device cpu|cuda|auto] [--tiny]
#
# The engine benchmarks in one go, as JSON files in OUT (summary.json, engine.json, syncs.json,
# steps.json, interleave.json, mixed.json): throughput (tokens/s, series*steps/s), host-device
# syncs per decode step, decode-step latency eager and with CUDA graphs, interleaved jobs.
# Needs only torch, numpy, pandas, pyarrow and safetensors (never imports service/, pydantic, Ray).
# Then the scheduler benchmark (`kronos bench mixed --quick`, through the service) when it exists
# and Ray + FastAPI are installed; otherwise mixed.json says why it was skipped. --tiny (the CPU dry
# run of tests/test_gpu_check.py) skips it unless GPU_CHECK_MIXED=1 (it starts Ray).
#
# PYTHON picks the interpreter (default: python3); GPU_CHECK_MIXED_ARGS replaces "--quick".
set -euo pipefail

if [[ $# -lt 1 || $1 == -* ]]; then
    echo "usage: $0 OUT [--device cpu|cuda|auto] [--tiny]" >&2
    exit 2
fi
OUT=$1
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
mkdir -p "$OUT"

TINY=0
for arg in "$@"; do [[ $arg == --tiny ]] && TINY=1; done

"$PY" "$ROOT/scripts/gpu_check.py" "$OUT" "$@"

skip_mixed() {
    "$PY" -c 'import json, sys; json.dump({"skipped": sys.argv[1]}, open(sys.argv[2], "w"))' "$1" "$OUT/mixed.json"
    echo "gpu-check: scheduler benchmark skipped: $1"
}
if [[ $TINY == 1 && ${GPU_CHECK_MIXED:-0} != 1 ]]; then
    skip_mixed "--tiny: kronos bench mixed starts Ray and the service (GPU_CHECK_MIXED=1 runs it)"
elif ! "$PY" -c 'import ray, fastapi' >/dev/null 2>&1; then
    skip_mixed "ray/fastapi not installed: kronos bench mixed needs the service"
elif ! "$PY" -m loadtests.bench_mixed --help >/dev/null 2>&1; then
    skip_mixed "kronos bench mixed (loadtests.bench_mixed) is not in this checkout"
else
    # shellcheck disable=SC2086 # GPU_CHECK_MIXED_ARGS is a list of flags
    if ! "$PY" -m loadtests.bench_mixed ${GPU_CHECK_MIXED_ARGS:---quick} --json "$OUT/mixed.json"; then
        skip_mixed "kronos bench mixed failed (exit status $?); see its output above"
    fi
fi
echo "gpu-check: figures in $OUT: $(cd "$OUT" && ls -- *.json | tr '\n' ' ')"
