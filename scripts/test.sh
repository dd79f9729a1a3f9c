#!/usr/bin/env bash
# Set up (idempotent: packages, build/venv, Release build) and run the whole test suite through
# CTest. CTest's first test, PythonVenvs (a fixture of every Python test), pip-installs the Python
# package into the two test venvs (scripts/python_venv.sh: torch 2.14.1 and Debian's python3-torch)
# while the C++ tests run beside it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
# One test per core, and beside them up to two of the tests that mostly wait (a scheduler's, Ray's):
# CMakeLists.txt says which, and writes build/ctest_resources.json (a slot per core).
ctest --test-dir build --output-on-failure -j "$(( $(nproc) + 2 ))" --resource-spec-file "$here/build/ctest_resources.json" \
  --timeout 900
