#!/usr/bin/env bash
# Set up (idempotent: packages, Release build) and run the whole test suite through CTest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
