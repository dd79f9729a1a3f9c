#!/usr/bin/env bash
# Set up (idempotent: packages, build/venv, Release build) and run the whole test suite through
# CTest. CTest's first test, PythonVenvs (a fixture of every Python test), runs README's install
# lines in a fresh copy and installs the wheel they build into the two test venvs
# (scripts/python_venv.sh: torch 2.14.1 and Debian's python3-torch) while the C++ tests run beside
# it; the C++ tests are one CTest test per GoogleTest suite (cmake/gtest_suites.cmake).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
