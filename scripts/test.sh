#!/usr/bin/env bash
# Set up (idempotent: packages, build/venv, Release build), pip-install the Python package into the
# two test venvs (scripts/python_venv.sh: torch 2.14.1 and Debian's python3-torch) and run the whole
# test suite through CTest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
# The Python package pip-installed into build/venv-torch-newest and build/venv-torch-oldest, where
# the Python tests (Python.*, PythonOldest.*) import it from.
bash scripts/python_venv.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
