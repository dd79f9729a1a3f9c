#!/usr/bin/env bash
# Compile-checks the sources against a CUDA libtorch 2.x without a GPU machine: every .cpp under
# src/, tests/ and examples/cpp/ (or the files given) through `g++ -fsyntax-only` with libtorch
# 2.6's headers (Debian trixie's libtorch-cuda-dev, 2.4 MB, with NCCL's process group and CUDA
# graphs), fmt 10 header-only
# (as libtorch 2.x's bundled fmt is used), and the CUDA toolkit's headers. Catches what the CPU build
# (pip's CPU torch 2.13, scripts/setup.sh) cannot: the CUDA-only and NCCL branches (SCALEINV_CUDA,
# USE_C10D_NCCL) and a call that differs between libtorch 2.6 and 2.13. It proves nothing about running; docs/gpu.md says what only a GPU checks.
#
#   bash scripts/check_torch2.sh [FILE.cpp ...]
# Needs build/generated/ (the demo's embedded files), which scripts/setup.sh's build writes.
# Environment: CUDA_INCLUDE (default /usr/local/cuda/include), JOBS (default the cores),
# DEPS (default .deps/torch2: the unpacked packages, fetched once from deb.debian.org).
# Exit: 0 every file compiles; 1 some file does not (its errors printed); 2 a missing tool or header.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${DEPS:-.deps/torch2}
CUDA_INCLUDE=${CUDA_INCLUDE:-/usr/local/cuda/include}
JOBS=${JOBS:-$(nproc)}
MIRROR=http://deb.debian.org/debian

[ -f "$CUDA_INCLUDE/cuda_runtime_api.h" ] || {
  echo "error: no CUDA headers at $CUDA_INCLUDE (fix: install the CUDA toolkit or set CUDA_INCLUDE)" >&2
  exit 2
}

# One package's pool path from a trixie Packages index (so a point release's rename is followed).
pool_path() {  # INDEX PACKAGE
  xz -dc "$1" | awk -v p="$2" '$1 == "Package:" { on = ($2 == p) } on && !done && $1 == "Filename:" { print $2; done = 1 }'
}
if [ ! -f "$DEPS/usr/include/torch/csrc/api/include/torch/version.h" ]; then
  mkdir -p "$DEPS/debs"
  for comp in contrib main; do
    curl -fsS "$MIRROR/dists/trixie/$comp/binary-amd64/Packages.xz" -o "$DEPS/debs/$comp.xz"
  done
  for spec in contrib:libtorch-cuda-dev main:libfmt-dev; do
    path=$(pool_path "$DEPS/debs/${spec%%:*}.xz" "${spec#*:}")
    [ -n "$path" ] || { echo "error: ${spec#*:} not in trixie's ${spec%%:*} index (fix: check $MIRROR)" >&2; exit 2; }
    curl -fsS "$MIRROR/$path" -o "$DEPS/debs/$(basename "$path")"
    dpkg -x "$DEPS/debs/$(basename "$path")" "$DEPS"
  done
fi
inc="$PWD/$DEPS/usr/include"
version=$(awk '/define TORCH_VERSION_(MAJOR|MINOR) /{ printf "%s%s", s, $3; s = "." }' "$inc/torch/csrc/api/include/torch/version.h")

# As the build compiles them: its flags (warnings as they are), the precompiled header included
# first, the tests' definitions; plus the 2.x CUDA build's definitions.
flags=(-fsyntax-only -std=gnu++20 -Wall -Wextra -Wno-unused-parameter -D_GLIBCXX_USE_CXX11_ABI=1
       -include "$PWD/src/engine/runtime/pch.h" -DSCALEINV_BIN="\"$PWD/build/scaleinv\"" -DSCALEINV_SOURCE_DIR="\"$PWD\""
       -DUSE_CUDA -DSCALEINV_CUDA=1 -DUSE_C10D_NCCL -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -DFMT_HEADER_ONLY=1
       -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1
       -I"$PWD/src" -I"$PWD/build/generated" -isystem "$inc" -isystem "$inc/torch/csrc/api/include" -isystem "$CUDA_INCLUDE")
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(find src tests examples/cpp -name '*.cpp' | sort); fi
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
printf '%s\n' "${files[@]}" | xargs -P "$JOBS" -I{} sh -c \
  'g++ "$@" "{}" > "'"$log"'/$(echo "{}" | tr / _).txt" 2>&1 || echo "{}" >> "'"$log"'/failed"' _ "${flags[@]}"
if [ -s "$log/failed" ]; then
  while read -r f; do
    echo "== $f"
    grep -E "error" "$log/$(echo "$f" | tr / _).txt" | head -5
  done < <(sort "$log/failed")
  echo "libtorch $version: $(wc -l < "$log/failed") of ${#files[@]} files do not compile"
  exit 1
fi
echo "libtorch $version (CUDA, NCCL headers): all ${#files[@]} files compile"
