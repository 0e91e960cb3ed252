# Sourced by scripts/test.sh and scripts/serve.sh: pick or make the Python environment, then
# install the project with the extras given as $1 (e.g. "dev,hub").
#
# Order: an activated virtualenv ($VIRTUAL_ENV) is used as is; otherwise the repository's
# `.venv` (created on first use, reused after). Never the system interpreter, which Debian and
# Ubuntu mark "externally managed" (PEP 668). torch==2.13.0 is pinned at install time: on a
# CPU-only machine with the wheel on disk pip takes that CPU build; elsewhere pip takes PyPI's
# build (CUDA on Linux). Sets $PY to the environment's python and puts its bin/ first on PATH.
kronos_venv() {
    local extras="$1"
    if [[ -n "${VIRTUAL_ENV:-}" && -x "${VIRTUAL_ENV}/bin/python" ]]; then
        PY="${VIRTUAL_ENV}/bin/python"
    else
        if [[ ! -x .venv/bin/python ]]; then
            echo "creating a virtual environment in $(pwd)/.venv" >&2
            if ! python3 -m venv .venv; then
                echo "error: python3 -m venv failed; on Debian/Ubuntu install it with" \
                     "'sudo apt-get install python3-venv', then rerun" >&2
                rm -rf .venv
                return 1
            fi
        fi
        PY="$(pwd)/.venv/bin/python"
        export VIRTUAL_ENV="$(pwd)/.venv"
    fi
    export PATH="${VIRTUAL_ENV}/bin:${PATH}"  # its console scripts (kronos) first, as if activated
    "$PY" -m pip install -q torch==2.13.0 -e ".[${extras}]"
}
