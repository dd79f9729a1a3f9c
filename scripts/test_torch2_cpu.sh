#!/usr/bin/env bash
# Builds scaleinv against libtorch 2.6 on the CPU and runs its test suite there: issue 14's "the
# CPU test suite passes against both" (Debian's 1.13 and a libtorch 2.x), checked on a machine with
# neither a GPU nor a libtorch 2.x installed. It takes Debian trixie's libtorch2.6 with everything
# it needs (its C library and libstdc++ included: about 100 packages, 150 MB, fetched once through
# a private apt configuration; nothing is installed), unpacks them into DEPS, and links the
# binaries with trixie's loader as their interpreter and DEPS's libraries on their RPATH, so they
# run on Debian 12 beside the system's own libraries. The Python module is not built (it belongs
# to the system python3's torch 1.13).
#
#   bash scripts/test_torch2_cpu.sh [CTEST-ARGS ...]     e.g. -R Dist  (default: the whole suite, -j 2)
# Environment: DEPS (default .deps/torch2-cpu), BUILD (default build-torch2-cpu), JOBS (default nproc).
# Exit: ctest's status; 2 when a package cannot be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
here="$PWD"
DEPS="${DEPS:-$here/.deps/torch2-cpu}"
BUILD="${BUILD:-$here/build-torch2-cpu}"
JOBS="${JOBS:-$(nproc)}"
root="$DEPS/root"

if [ ! -f "$root/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.6" ]; then
  apt="$DEPS/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/partial" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d" "$DEPS/debs"
  : >"$apt/status"
  echo "deb http://deb.debian.org/debian trixie main" >"$apt/sources.list"
  cat >"$apt/apt.conf" <<EOF
Dir::State::Lists "$apt/lists";
Dir::State::status "$apt/status";
Dir::Cache "$apt/cache";
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/none";
Dir::Etc::Preferences "$apt/none";
Dir::Etc::PreferencesParts "$apt/etc/preferences.d";
Dir::Etc::Parts "$apt/etc/apt.conf.d";
APT::Architecture "amd64";
Acquire::Languages "none";
APT::Sandbox::User "root";
EOF
  export APT_CONFIG="$apt/apt.conf"
  apt-get -qq update || { echo "error: cannot read trixie's package index (fix: check access to deb.debian.org)" >&2; exit 2; }
  # The runtime closure, as apt would install it on an empty trixie, plus the headers.
  mapfile -t pkgs < <(apt-get -s install --no-install-recommends libtorch2.6 libgomp1 libopenblas0-pthread |
                      awk '$1 == "Inst" { print $2 }')
  pkgs+=(libtorch-dev libgloo-dev libfmt-dev libsleef-dev libprotobuf-dev)
  (cd "$DEPS/debs" && apt-get -qq download "${pkgs[@]}") ||
    { echo "error: a trixie package could not be fetched (fix: check access to deb.debian.org)" >&2; exit 2; }
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$root"; done
  echo "[torch2-cpu] ${#pkgs[@]} packages unpacked into $root"
fi

lib="$root/usr/lib/x86_64-linux-gnu"
rpath="$lib:$root/lib/x86_64-linux-gnu:$lib/openblas-pthread"
# trixie's loader and libraries for every binary (and the processes the tests start); the
# libraries' newer symbol versions (glibc 2.38+, GLIBCXX 3.4.33) are resolved at run time.
link="-Wl,--dynamic-linker=$root/usr/lib64/ld-linux-x86-64.so.2 -Wl,--disable-new-dtags -Wl,-rpath,$rpath"
link="$link -Wl,-rpath-link,$rpath -Wl,--allow-shlib-undefined"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake" -DTorch_DIR="$lib/cmake/Torch" -DTORCH_LIBRARY="$lib/libtorch.so" \
  -DSCALEINV_PYTHON_MODULE=OFF -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
"$BUILD/scaleinv" theory --help >/dev/null  # it starts under trixie's loader
cd "$BUILD"
if [ $# -eq 0 ]; then set -- -j 2; fi
ctest --timeout 600 "$@"
