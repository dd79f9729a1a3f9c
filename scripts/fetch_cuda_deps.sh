#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages a CUDA build of scaleinv needs besides
# libtorch, into DIR (default .deps/debs), for a GPU machine that has no package registry: carry
# DIR there and run scripts/build_cuda.sh --debs DIR. Needs apt (run 'apt-get update' once first).
# libtorch 2.x brings its own fmt (header-only) and gloo runtime; libgloo-dev gives gloo's headers.
# dataset-fashion-mnist (31 MB, data only) is for the demo and the Fashion-MNIST tests there
# (bench/gpu_check.sh unpacks it where scaleinv looks). Also caches the KJV text into .deps/data
# (below), and copies the plain-PyTorch GPU peer (PEER, default ../shared/peer/gpt_peer_gpu.py beside
# the checkout, where it is found) into .deps/peer, where bench/gpu_check.sh looks for it. Carry
# .deps/debs, .deps/data and .deps/peer (40 MB together).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "${1:-$here/.deps/debs}"
dir="$(cd "${1:-$here/.deps/debs}" && pwd)"  # (absolute: the listing below runs after the cd)
cd "$dir"
apt-get download libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 \
  libsqlite3-dev libsqlite3-0 zlib1g-dev libre2-dev libre2-9 libcsv-dev libcsv3 libgtest-dev libgmock-dev libgloo-dev dataset-fashion-mnist
ls -1 "$dir"
# The KJV text the demo and the sweeps train on, as scaleinv caches it (4.4 MB): a GPU machine has
# no bible-kjv, so bench/gpu_check.sh points SCALEINV_DATA_DIR at .deps/data when it holds this.
data="$here/.deps/data"
if [ ! -s "$engine/data/kjv.txt" ]; then
  [ -x "$here/build/scaleinv" ] || { echo "fetch_cuda_deps.sh: no build/scaleinv to cache the KJV text (fix: run scripts/setup.sh first)" >&2; exit 2; }
  mkdir -p "$data"
  tmp="$(mktemp -d)"
  SCALEINV_DATA_DIR="$data" "$here/build/scaleinv" train --quiet --config "$here/examples/gpt_kjv.toml" \
    --set train.steps=1 --set train.eval_every=0 --set train.out_dir=\""$tmp/run"\" >/dev/null
  rm -rf "$tmp"
fi
ls -l "$engine/data/kjv.txt"
peer="${PEER:-$here/../shared/peer/gpt_peer_gpu.py}"
if [ -f "$peer" ]; then
  mkdir -p "$here/.deps/peer" && cp "$peer" "$here/.deps/peer/gpt_peer_gpu.py"
  ls -l "$here/.deps/peer/gpt_peer_gpu.py"
else
  echo "fetch_cuda_deps.sh: no GPU peer at $peer: gpu_check.sh's speed stage needs it (fix: PEER=PATH/gpt_peer_gpu.py)" >&2
fi
