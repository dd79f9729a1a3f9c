#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages a CUDA build of scaleinv needs besides
# libtorch, into DIR (default .deps/debs), for a GPU machine that has no package registry: carry
# DIR there and run scripts/build_cuda.sh --debs DIR. Needs apt (run 'apt-get update' once first).
# libtorch 2.x brings its own fmt (header-only) and gloo runtime; libgloo-dev gives gloo's headers.
# dataset-fashion-mnist (31 MB, data only) is for the demo and the Fashion-MNIST tests there
# (bench/gpu_check.sh unpacks it where scaleinv looks). Also caches the KJV text into .deps/data
# (below). Carry .deps/debs and .deps/data (39 MB together).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$here/.deps/debs}"
mkdir -p "$dir"
cd "$dir"
apt-get download libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 \
  libsqlite3-dev libsqlite3-0 zlib1g-dev libgtest-dev libgmock-dev libgloo-dev dataset-fashion-mnist
ls -1 "$dir"
# The KJV text the demo and the sweeps train on, as scaleinv caches it (4.4 MB): a GPU machine has
# no bible-kjv, so bench/gpu_check.sh points SCALEINV_DATA_DIR at .deps/data when it holds this.
data="$here/.deps/data"
if [ ! -s "$data/kjv.txt" ]; then
  [ -x "$here/build/scaleinv" ] || { echo "fetch_cuda_deps.sh: no build/scaleinv to cache the KJV text (fix: run scripts/setup.sh first)" >&2; exit 2; }
  mkdir -p "$data"
  tmp="$(mktemp -d)"
  SCALEINV_DATA_DIR="$data" "$here/build/scaleinv" train --quiet --config "$here/examples/gpt_kjv.toml" \
    --set train.steps=1 --set train.eval_every=0 --set train.out_dir=\""$tmp/run"\" >/dev/null
  rm -rf "$tmp"
fi
ls -l "$data/kjv.txt"
