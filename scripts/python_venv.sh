#!/usr/bin/env bash
# The Python package as a user gets it: a venv (build/venv, seeing Debian's python3-torch and
# python3-torchvision through --system-site-packages) with `pip install .` of this checkout, offline
# (--no-build-isolation: the venv's own setuptools builds it; setup.py runs CMake on the torch-free
# core). The Python tests (CTest's Python.*) run from that venv, outside the checkout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
venv="${SCALEINV_VENV:-build/venv}"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --no-index \
  --force-reinstall .
