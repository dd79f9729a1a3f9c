#!/usr/bin/env bash
# Speed against the Python peer (docs/design.md "Speed"): runs `scaleinv bench --json`, then the peer
# (../shared/peer/gpt_peer.py, plain PyTorch) at the same shapes right after, on the same torch: the
# peer runs in build/venv (scripts/setup.sh), whose pip torch's libtorch the CLI links. Prints the
# tokens/s ratio per width and the share of the sgemm peak. Ratios, not absolute times, are what
# count (the machine is shared).
#
#   bash bench/compare_peer.sh [extra bench options, e.g. --quick or --widths 64,512]
# Environment: BUILD (build directory, default build), PEER (peer script), THREADS (cores for
# both sides: ours --threads, the peer's torch.set_num_threads; default the machine's cores),
# PEER_STEPS (default 20), OUT (default out/bench), PY (the peer's Python; default build/venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PEER=${PEER:-../shared/peer/gpt_peer.py}
THREADS=${THREADS:-$(nproc)}
PEER_STEPS=${PEER_STEPS:-20}
OUT=${OUT:-out/bench}
PY=${PY:-$BUILD/venv/bin/python}

"$PY" -c 'import torch' 2>/dev/null || { echo "error: $PY has no torch (fix: bash scripts/setup.sh, or set PY)" >&2; exit 2; }
[ -x "$BUILD/scaleinv" ] || { echo "error: $BUILD/scaleinv not built (fix: bash scripts/setup.sh, or set BUILD)" >&2; exit 2; }
[ -f "$PEER" ] || { echo "error: peer script $PEER not found (fix: set PEER=path/to/gpt_peer.py)" >&2; exit 2; }
mkdir -p "$OUT"

# Both sides' libtorch: the CLI's (its RPATH) and the peer's, so a ratio names its torch.
ours_lib=$(ldd "$BUILD/scaleinv" | awk '/libtorch_cpu/ { print $3 }')
peer_lib=$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')
echo "ours: $(realpath "$ours_lib"); peer: $(realpath "$peer_lib") (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/scaleinv" --threads "$THREADS" bench --json "$OUT/bench.json" "$@"

widths=$("$PY" -c 'import json,sys; print(" ".join(str(g["width"]) for g in json.load(open(sys.argv[1]))["gpt"]))' "$OUT/bench.json")
: > "$OUT/peer.txt"
for w in $widths; do
  echo "peer: width $w" >&2
  THREADS=$THREADS "$PY" "$PEER" "$w" 4 "$PEER_STEPS" | tee -a "$OUT/peer.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$OUT/bench.json" "$OUT/peer.txt" <<'EOF'
import json, re, sys
ours = json.load(open(sys.argv[1]))
peer = {}
for line in open(sys.argv[2]):
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    peer[int(f["width"])] = (int(f["params"]), float(f["tokens/s"]))
peak = ours["sgemm_gflops"]
L, T = 4, 128
print(f"\nsgemm peak {peak:.1f} GFLOP/s; ours ran {ours['threads']} libtorch + {ours.get('blas_threads', 0)} BLAS threads; "
      "flops/token = 6 N + 12 L T d for both sides")
print(f"{'width':>6} {'ours tok/s':>11} {'peer tok/s':>11} {'ratio':>6} {'target':>7} {'ours GFLOP/s':>13} {'% sgemm':>8} {'peer % sgemm':>13}")
for g in ours["gpt"]:
    w = g["width"]
    if w not in peer:
        continue
    n, pt = peer[w]
    pg = pt * (6 * n + 12 * L * T * w) / 1e9
    target = 2.0 if w <= 128 else (1.2 if w >= 512 else float("nan"))
    ratio = g["tokens_per_s"] / pt
    mark = "" if target != target else ("ok" if ratio >= target else "MISS")
    print(f"{w:>6} {g['tokens_per_s']:>11.0f} {pt:>11.0f} {ratio:>6.2f} {('-' if target != target else f'{target:.1f}x'):>7} "
          f"{g['gflops']:>13.1f} {100 * g['gflops'] / peak:>7.1f}% {100 * pg / peak:>12.1f}%  {mark}")
e = ours.get("ensemble")
if e:
    print(f"ensemble: {e['members']} members at width {e['width']}: {e['time_ratio']:.2f}x one member's time "
          f"(target <= 2.5x; {'batched' if e.get('batched') else 'one run per member'})")
if "coordcheck_step_ms" in ours:
    print(f"coordcheck: {ours['coordcheck_step_ms']:.1f} ms per step")
EOF
