#!/usr/bin/env bash
# Configures and builds scaleinv against a CUDA libtorch 2.x (2.4 or newer), into build-cuda/.
#
#   scripts/build_cuda.sh [--torch CMAKE_PREFIX] [--debs DIR | --deps PREFIX] [--build DIR] [--tests]
#
#   --torch   libtorch's CMake prefix (default: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
#   --debs    a folder of .deb files from scripts/fetch_cuda_deps.sh: unpacked with dpkg -x into
#             the deps prefix (for a machine with no package registry)
#   --deps    where the Debian -dev packages are (default /usr when installed, else .deps/prefix)
#   --build   build directory (default build-cuda)
#   --tests   also build the test suite (scaleinv_tests)
# The CPU build (scripts/setup.sh, Debian's libtorch 1.13) is unaffected: the same sources, the
# version differences behind src/core/torch_compat.h.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
torch="" debs="" deps="" build="build-cuda" tests=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch="$2"; shift 2 ;;
    --debs) debs="$2"; shift 2 ;;
    --deps) deps="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --tests) tests=ON; shift ;;
    *) echo "build_cuda.sh: unknown argument '$1' (see the header of scripts/build_cuda.sh)" >&2; exit 2 ;;
  esac
done
if [ -z "$torch" ]; then
  torch="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" || {
    echo "build_cuda.sh: no --torch given and python3 cannot import torch (fix: pass --torch <libtorch>/share/cmake)" >&2
    exit 2
  }
fi
if [ -n "$debs" ]; then
  deps="${deps:-$here/.deps/prefix}"
  mkdir -p "$deps"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$deps"; done
fi
deps="${deps:-/usr}"
prefix="$torch;$deps/usr;$deps/usr/lib/x86_64-linux-gnu/cmake;$deps/usr/share/cmake"
[ "$deps" = "/usr" ] && prefix="$torch"
echo "[build_cuda] libtorch: $torch; deps: $deps; build: $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DSCALEINV_TESTS="$tests" -DSCALEINV_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=native ${CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
echo "[build_cuda] built $build/scaleinv"
