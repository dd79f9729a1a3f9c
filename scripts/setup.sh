#!/usr/bin/env bash
# Idempotent set-up on Debian 12 or 13: installs the Debian packages scaleinv needs (only those
# missing), makes the project's venv build/venv with pip's torch (SCALEINV_TORCH, default 2.13.0),
# configures and builds Release into build/ against that torch's own libtorch (the way PyTorch's C++
# extensions build: torch.utils.cmake_prefix_path), and makes build/venv import scaleinv from this
# checkout. Fast when nothing changed. docs/speed.md#which-libtorch says why pip's libtorch and not
# Debian's (1.13 on Debian 12, 2.6 on 13): one libtorch on both bases, the one our users' Python has.
#
# Environment: SCALEINV_TORCH (pip's torch for the CLI and build/venv; default 2.13.0, the CPU build
# that lies on this project's machines), PYTHON (the interpreter the venv is made from; default the
# first python3 on PATH, which must have venv and pip), BUILD_TYPE, CMAKE_ARGS.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# chromium: the tests render the HTML reports headless and check every image loads; procps: pgrep,
# which the launch fault test uses to find a rank. libgloo-dev: gloo's headers only, which c10d's
# ProcessGroupGloo.hpp includes and pip's libtorch does not ship (its gloo is inside libtorch_cpu).
# pybind11-dev, python3-dev: the Python module built by CMake beside the CLI. python3-venv,
# python3-setuptools, python3-wheel (offline `pip install --no-build-isolation .`),
# python3-torch, python3-torchvision, python3-numpy: the oldest-torch leg of the Python tests
# (Debian's python3-torch: 1.13 on Debian 12, 2.6 on 13; scripts/python_venv.sh). binutils: readelf,
# which checks the extension links no torch. libcsv-dev: RFC 4180 CSV for import-results (Debian 12 and 13).
# slurmctld, slurmd, slurm-client, munge: the real Slurm cluster on loopback that the tests start
# and stop (scripts/slurm_local.sh; 22.05 on Debian 12, 24.11 on 13). The packages' own services
# are not used: a system munged that the install may start is left alone (the test cluster runs its
# own, on its own socket and key).
PKGS=(build-essential cmake ninja-build pkg-config
      libgloo-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev
      libsqlite3-dev sqlite3 zlib1g-dev libre2-dev libcsv-dev libgtest-dev libgmock-dev libbenchmark-dev
      gnuplot-nox bible-kjv dataset-fashion-mnist chromium procps
      python3 python3-dev pybind11-dev python3-venv python3-setuptools python3-wheel
      python3-torch python3-torchvision python3-numpy
      binutils slurmctld slurmd slurm-client munge)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The project's venv: pip's torch, whose libtorch the CLI links, and the Python package's build
# requirements (so `pip install --no-build-isolation .` works offline from here on).
TORCH="${SCALEINV_TORCH:-2.13.0}"
PY="${PYTHON:-$(command -v python3)}"
venv=build/venv
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  rm -rf "$venv"  # a venv without torch (a set-up stopped half-way): made anew
fi
if [ ! -x "$venv/bin/python" ]; then
  "$PY" -m venv "$venv" || { echo "[setup] error: $PY -m venv failed (fix: install python3-venv, or set PYTHON to a Python with venv)" >&2; exit 2; }
fi
have=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$TORCH" ]; then
  echo "[setup] pip install torch==$TORCH into $venv"
  "$venv/bin/python" -m pip install -q "torch==$TORCH" numpy "setuptools>=70.1" "pybind11>=2.10"
fi
torch_cmake=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')

BUILD_TYPE="${BUILD_TYPE:-Release}"
# A build configured against another libtorch (an older set-up's Debian one, or another venv torch)
# is configured anew: CMake would otherwise keep the cached Torch_DIR.
if [ -f build/CMakeCache.txt ] && ! grep -q "^Torch_DIR:PATH=$torch_cmake/Torch\$" build/CMakeCache.txt; then
  echo "[setup] build/ was configured against another libtorch: configuring anew"
  rm -rf build/CMakeCache.txt build/CMakeFiles
fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCMAKE_PREFIX_PATH="$torch_cmake" \
    -DSCALEINV_PYTHON="$here/$venv/bin/python" ${CMAKE_ARGS:-}
fi
cmake --build build -j "$(nproc)"

# build/venv imports scaleinv from this checkout: a .pth file in its site-packages names python/
# (the package) and build/python/ (the C++ half, _scaleinv, built above for this venv's Python).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
want=$(printf '%s\n%s' "$here/python" "$here/build/python")
if [ "$(cat "$site/scaleinv.pth" 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" > "$site/scaleinv.pth.tmp"
  mv "$site/scaleinv.pth.tmp" "$site/scaleinv.pth"
fi
