#!/usr/bin/env bash
# The mixture-of-experts step against a plain-PyTorch peer of the same network (issue 36; docs/moe.md
# "Speed"): for each width, `scaleinv train` of examples/moe_kjv.toml's model (E experts, top-k,
# depth 2, batch 16, T 64) on Markov-chain tokens, then bench/moe_peer.py at the same shapes right
# after; tokens/s of the steps after 2 warm-up steps on both sides (ours from metrics.jsonl's
# elapsed_s at step 2 and at the last step), and their ratio.
#
#   bash bench/compare_moe_peer.sh [WIDTHS (default "64 128 256")]
# Environment: BUILD (default build), STEPS (measured steps, default 20), EXPERTS (8), TOP_K (2),
# THREADS (both sides, default all cores), OUT (default out/bench_moe), DEVICE (cpu, or cuda: both
# sides on the GPU; the peer then attends through SDPA), PY (default $BUILD/venv/bin/python, the venv
# whose pip torch the CLI links, so both sides run one libtorch; on a GPU machine the python3 that
# holds its torch).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-20}
EXPERTS=${EXPERTS:-8}
TOP_K=${TOP_K:-2}
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-out/bench_moe}
WIDTHS=${1:-"64 128 256"}
PY=${PY:-$BUILD/venv/bin/python}
DEVICE=${DEVICE:-cpu}
"$PY" -c 'import torch' 2>/dev/null || { echo "error: $PY has no torch (fix: bash scripts/setup.sh, or set PY)" >&2; exit 2; }
[ -x "$BUILD/scaleinv" ] || { echo "error: $BUILD/scaleinv not built (fix: bash scripts/setup.sh, or set BUILD)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%6s %11s %11s %6s\n' width "ours tok/s" "peer tok/s" ratio > "$OUT/table.txt"
for w in $WIDTHS; do
  "$BUILD/scaleinv" --threads "$THREADS" train --config examples/moe_kjv.toml --quiet \
    --set "model.width=$w" --set "model.experts=$EXPERTS" --set "model.top_k=$TOP_K" \
    --set 'data.source="markov"' --set data.vocab=256 --set data.markov_length=200000 \
    --set "train.steps=$((STEPS + 2))" --set train.log_every=1 --set train.eval_every=0 \
    --set train.eval_batches=1 --set "train.device=\"$DEVICE\"" --set "train.out_dir=\"$OUT/w$w\"" >/dev/null
  ours=$("$PY" - "$OUT/w$w/metrics.jsonl" "$STEPS" <<'PYEOF'
import json, sys
rows = {r["step"]: r["elapsed_s"] for r in map(json.loads, open(sys.argv[1]))}
steps = int(sys.argv[2]); last = max(rows)
print(f"{16 * 64 * steps / (rows[last] - rows[last - steps]):.1f}")
PYEOF
)
  peer=$(THREADS=$THREADS DEVICE=$DEVICE "$PY" bench/moe_peer.py "$w" 2 "$STEPS" "$EXPERTS" "$TOP_K" | sed 's/.*tokens\/s=//')
  "$PY" -c "import sys; w,o,p=sys.argv[1:]; print(f'{int(w):>6} {float(o):>11.0f} {float(p):>11.0f} {float(o)/float(p):>6.2f}')" \
    "$w" "$ours" "$peer" >> "$OUT/table.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "E=$EXPERTS top_k=$TOP_K depth 2, batch 16, T 64, $STEPS steps after 2 warm-up, $THREADS threads, $DEVICE"
cat "$OUT/table.txt"
