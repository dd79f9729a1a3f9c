#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages a CUDA build of scaleinv needs besides
# libtorch, into DIR (default .deps/debs), for a GPU machine that has no package registry: carry
# DIR there and run scripts/build_cuda.sh --debs DIR. Needs apt (run 'apt-get update' once first).
# libtorch 2.x brings its own fmt (header-only) and gloo runtime; libgloo-dev gives gloo's headers.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$here/.deps/debs}"
mkdir -p "$dir"
cd "$dir"
apt-get download libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 \
  libsqlite3-dev libsqlite3-0 zlib1g-dev libgtest-dev libgmock-dev libgloo-dev
ls -1 "$dir"
