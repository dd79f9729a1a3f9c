#!/usr/bin/env bash
# Set up (idempotent: packages, Release build), pip-install the Python package into build/venv and
# run the whole test suite through CTest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
# The Python package pip-installed into build/venv, where the Python tests import it from.
bash scripts/python_venv.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
