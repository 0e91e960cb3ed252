#!/usr/bin/env bash
# Install the project with its test extras and run the test suite (the README's second command).
# Uses the activated virtualenv, else the repository's .venv (created on first use): see venv.sh.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
kronos_venv "dev,hub"
"$PY" -m ruff check .
"$PY" -m mypy  # [tool.mypy] in pyproject.toml: files, plugins, the strict seams
"$PY" -m pytest "$@"
