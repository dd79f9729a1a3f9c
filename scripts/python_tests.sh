#!/usr/bin/env bash
# Runs one file of tests/python (its stem: test_apply) with the venv's Python, from an empty
# folder outside the checkout and without PYTHONPATH, so the tests import the installed package
# (scripts/python_venv.sh), and a file missing from the package fails them. It runs them as
# `python -m unittest` does, except that a file whose tests all skipped because no scheduler (Slurm)
# could start exits 77, a skip for ctest (scripts/python_unittest.py).
#   scripts/python_tests.sh VENV STEM
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$1"; stem="$2"
if [ ! -x "$venv/bin/python" ]; then
  echo "no venv at $venv (fix: run bash scripts/python_venv.sh, which bash scripts/test.sh runs)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
exec env -u PYTHONPATH "$venv/bin/python" "$here/scripts/python_unittest.py" discover -v -s "$here/tests/python" -p "$stem.py"
