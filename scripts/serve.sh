#!/usr/bin/env bash
# Install the project with the service extras and start the service (the README's first command).
# Uses the activated virtualenv, else the repository's .venv (created on first use): see venv.sh.
# Arguments go to `kronos serve` (e.g. --port 8080, --model kronos-small).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
kronos_venv "serve"
exec "$(dirname "$PY")/kronos" serve "$@"
