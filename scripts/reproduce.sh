#!/usr/bin/env bash
# Regenerates a results page (docs/results/NAME.md) from the commands it shows, rewriting each
# command's output block with what the command prints today (scripts/reproduce.py says how):
#   scripts/reproduce.sh NAME|all [--check] [--cheap] [--list]
# --cheap runs only the reports on stores kept in docs/results/data/ (seconds; the test suite runs
# `all --cheap --check`); without it a page's sweeps run too (hours on 2 cores for the CPU pages).
set -euo pipefail
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/reproduce.py" "$@"
