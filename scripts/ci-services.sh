#!/usr/bin/env bash
# Services the test suite needs besides Python packages:
# - the Prometheus server (Debian package `prometheus`, which also ships promtool) for
#   tests/integration/test_prometheus.py, and promtool for .ci/run's rule checks and
#   tests/test_deploy_files.py (promtool test rules);
# - Chromium and its WebDriver (Debian packages `chromium`, `chromium-driver`) for the browser
#   tests of /ui and /docs (tests/integration/test_ui_browser.py, test_ui_keys.py). Debian's
#   packages only: nothing downloads a browser build.
# Idempotent and quiet: installs only what is missing.
set -euo pipefail
need=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    need+=(prometheus)
fi
if ! command -v chromium >/dev/null 2>&1; then
    need+=(chromium)
fi
if ! command -v chromedriver >/dev/null 2>&1; then
    need+=(chromium-driver)
fi
if [ "${#need[@]}" -eq 0 ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# the package may try to start a system service; the tests run their own server
if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
