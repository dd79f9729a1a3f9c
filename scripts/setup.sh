#!/usr/bin/env bash
# Idempotent set-up: installs the Debian packages scaleinv needs (only those missing),
# then configures and builds Release into build/. Fast when nothing changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# chromium: the tests render the HTML reports headless and check every image loads; procps:
# pgrep, which the launch fault test uses to find a rank. python3-*, pybind11-dev: the Python module
# (python/): pybind11-dev builds it, python3-venv, python3-setuptools and python3-wheel let `pip install .`
# run offline into a venv (scripts/python_venv.sh), python3-torch and python3-torchvision are what the
# Python tests run beside; binutils: readelf, which checks the extension links no torch.
PKGS=(build-essential cmake ninja-build pkg-config
      libtorch-dev libopenblas0-pthread libgloo-dev
      libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev
      libsqlite3-dev sqlite3 zlib1g-dev libre2-dev libgtest-dev libgmock-dev libbenchmark-dev
      gnuplot-nox bible-kjv dataset-fashion-mnist chromium procps
      python3-dev pybind11-dev python3-venv python3-setuptools python3-wheel python3-torch python3-torchvision python3-numpy
      binutils)

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

# libtorch must use OpenBLAS (pthread) rather than the reference BLAS: ~30x faster sgemm here.
if command -v update-alternatives >/dev/null; then
  for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
    target=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-pthread | head -n1 || true)
    if [ -n "$target" ]; then
      cur=$(update-alternatives --query "$alt" 2>/dev/null | awk '/^Value:/{print $2}')
      [ "$cur" = "$target" ] || { SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"; $SUDO update-alternatives --set "$alt" "$target" >/dev/null; }
    fi
  done
fi

BUILD_TYPE="${BUILD_TYPE:-Release}"
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${CMAKE_ARGS:-}
fi
cmake --build build -j "$(nproc)"

# /usr/bin/python3 imports scaleinv from this checkout without PYTHONPATH: a .pth file in its
# site-packages names python/ (the package) and build/python/ (the C++ half, _scaleinv).
if [ -x /usr/bin/python3 ] && compgen -G "build/python/_scaleinv*.so" >/dev/null; then
  site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
  want=$(printf '%s\n%s' "$here/python" "$here/build/python")
  if [ "$(cat "$site/scaleinv.pth" 2>/dev/null)" != "$want" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO mkdir -p "$site"
    printf '%s\n' "$want" | $SUDO tee "$site/scaleinv.pth.tmp" >/dev/null
    $SUDO mv "$site/scaleinv.pth.tmp" "$site/scaleinv.pth"
  fi
fi
