#!/usr/bin/env bash
# Services the test suite needs besides Python packages: the Prometheus server (Debian
# package `prometheus`, which also ships promtool) for tests/integration/test_prometheus.py, and
# promtool for .ci/run's rule checks and tests/test_deploy_files.py (promtool test rules).
# Idempotent and quiet: does nothing when the binaries are already there.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# the package may try to start a system service; the tests run their own server
if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null
