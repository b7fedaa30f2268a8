#!/usr/bin/env bash
# Install everything the test suite needs (Python packages in .venv, Debian's chromium and haproxy)
# and run every test. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q -r requirements-dev.txt
# torchtitan's config dataclasses (tests/exports/test_exports_torchtitan.py); its other dependencies are CUDA-only or heavy
# (a requirements file cannot say --no-deps for one package)
.venv/bin/python -m pip install -q --no-deps torchtitan==0.3.0
# Debian's chromium (the browser tests) and haproxy (the replicas behind a sticky proxy: tests/deploy/test_replicas.py)
MISSING=""
command -v chromium >/dev/null 2>&1 || MISSING="$MISSING chromium"
command -v haproxy >/dev/null 2>&1 || MISSING="$MISSING haproxy"
if [ -n "$MISSING" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $MISSING >/dev/null
fi
# the C replay of the caching allocator (calculator/allocator/native; optional: without a compiler the Python one runs)
.venv/bin/python -m calculator.allocator.native >/dev/null || true
# the import contracts of .importlinter (layers from the CLI down to the core, no cycles, no network in the math)
.venv/bin/lint-imports --no-logo .importlinter >/dev/null || .venv/bin/lint-imports --no-logo .importlinter
exec .venv/bin/python -m pytest -q "$@"
