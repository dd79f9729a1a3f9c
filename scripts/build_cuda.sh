#!/usr/bin/env bash
# Configures and builds scaleinv against a CUDA libtorch 2.x (2.4 or newer), into build-cuda/.
#
#   scripts/build_cuda.sh [--torch CMAKE_PREFIX] [--debs DIR | --deps PREFIX] [--build DIR] [--tests]
#                         [--nccl-include DIR] [--python]
#
#   --torch   libtorch's CMake prefix (default: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
#   --debs    a folder of .deb files from scripts/fetch_cuda_deps.sh: unpacked with dpkg -x into
#             the deps prefix (for a machine with no package registry)
#   --deps    where the Debian -dev packages are (default /usr when installed, else .deps/prefix)
#   --build   build directory (default build-cuda)
#   --tests   also build the test suite (scaleinv_tests)
#   --nccl-include  the folder holding the nccl.h of libtorch's NCCL (default: the first of pip's
#             nvidia/*/include beside torch, /usr/local/cuda/include and /usr/include whose version
#             is torch's own torch.cuda.nccl.version(); none: no NCCL, data parallel through Gloo)
#   --python  also build the Python module (off by default: scripts/setup.sh builds it for build/venv)
# The CPU build (scripts/setup.sh, pip's CPU torch 2.13.0 in build/venv) is unaffected: the same sources, the
# version differences behind src/engine/runtime/torch_compat.h.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
torch="" debs="" deps="" build="build-cuda" tests=OFF nccl="" python=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --nccl-include) nccl="$2"; shift 2 ;;
    --python) python=ON; shift ;;
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
  for f in "$debs"/*.deb; do
    case "$(basename "$f")" in dataset-*) continue ;; esac  # data, not build dependencies (gpu_check.sh unpacks it)
    dpkg -x "$f" "$deps"
  done
fi
deps="${deps:-/usr}"
prefix="$torch;$deps/usr;$deps/usr/lib/x86_64-linux-gnu/cmake;$deps/usr/share/cmake"
[ "$deps" = "/usr" ] && prefix="$torch"
# nccl.h: ProcessGroupNCCL's header includes it and pip's torch does not ship it; the nvidia-nccl
# wheel torch depends on does. Its version must be the one libtorch was built with (the options
# struct NCCL passes is laid out by the header), so a header of another version is not used.
if [ -z "$nccl" ]; then
  nccl="$(python3 - <<'PY' 2>/dev/null || true
import glob, os, re
import torch
want = torch.cuda.nccl.version()
want = tuple(want) if isinstance(want, (tuple, list)) else (want // 10000, want // 100 % 100, want % 100)
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
candidates = [h for root in roots for h in sorted(glob.glob(os.path.join(root, "**", "include", "nccl.h"), recursive=True))]
candidates += [d + "/nccl.h" for d in ("/usr/local/cuda/include", "/usr/include") if os.path.exists(d + "/nccl.h")]
for h in candidates:
    text = open(h).read()
    got = tuple(re.search(r"#define NCCL_%s\s+(\d+)" % k, text) for k in ("MAJOR", "MINOR", "PATCH"))
    if all(got) and tuple(int(m.group(1)) for m in got) == want:
        print(os.path.dirname(h))
        raise SystemExit
PY
)"
  if [ -z "$nccl" ]; then
    echo "[build_cuda] no nccl.h of torch's NCCL version beside torch: no NCCL, data parallel on CUDA goes through Gloo (fix: --nccl-include DIR)"
  fi
fi
echo "[build_cuda] libtorch: $torch; deps: $deps; build: $build; nccl.h: ${nccl:-none}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DSCALEINV_TESTS="$tests" -DSCALEINV_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=native \
  -DSCALEINV_NCCL_INCLUDE="$nccl" -DSCALEINV_PYTHON_MODULE="$python" ${CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
echo "[build_cuda] built $build/scaleinv"
