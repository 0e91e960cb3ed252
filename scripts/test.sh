#!/usr/bin/env bash
# Install the project with its test extras and run the test suite (the README's second command).
# torch==2.13.0 is pinned at install time: on a CPU-only machine with the wheel on disk pip takes
# that CPU build; elsewhere pip takes PyPI's build (CUDA on Linux).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0 -e '.[dev,hub]'
python3 -m ruff check .
python3 -m pytest "$@"
