#!/usr/bin/env python3
"""Where the GPU peer's training step spends its device time (docs/results/peak_speed_gpu.md): runs the plain-PyTorch
GPU peer (gpt_peer_gpu.py, eager + SDPA and torch.compile) as its own script does, timing included,
then profiles 10 more of its steps with torch.profiler and sums the CUDA kernels' time by
class: matrix products, attention, norms, activations, the optimizer, the loss, casts and copies, and
the rest (compile's generated Triton kernels are their own class: they fuse several of the others).

    python3 bench/peer_profile_gpu.py PEER.py WIDTH DEPTH SEQ BATCH STEPS PEAK_TFLOPS [VARIANT ...]

VARIANTs default to "sdpa compile". Prints, per variant, the peer's own timing line, then one table
row per class (ms per step, share of kernel time) and the kernel time per step against the step's
wall time; last, a line with the share of the step spent outside matrix products and attention,
the most that fusing the other kernels away could save. Reads the peer's `step` from its globals
(runpy): the peer's code is run, not copied."""
import re
import runpy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

CLASSES = [  # (class, regex over the kernel's name), first match wins
    ("triton (compile's fused)", r"^triton_|triton"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matrix products", r"gemm|nvjet|cutlass|xmma|sm90_|sm80_|cublas|wgmma|splitK"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("norms", r"layer_norm|LayerNorm|rms_norm"),
    ("activations", r"gelu|GeluCUDA|silu"),
    ("loss (softmax, nll)", r"softmax|nll|cross_entropy|log_softmax"),
    ("casts and copies", r"copy|cast|to_copy|Memcpy|Memset|fill"),
    ("other elementwise and reductions", r"."),
]


def classify(name):
    for cls, pat in CLASSES:
        if re.search(pat, name, re.IGNORECASE):
            return cls
    return CLASSES[-1][0]


def run(peer, args, variant, steps):
    sys.argv = [peer] + args[:5] + [variant] + args[5:6]
    g = runpy.run_path(peer, run_name="__main__")  # prints the peer's own timing line
    step = g["step"]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        torch.cuda.synchronize()
    wall_ms = start.elapsed_time(end) / steps
    by = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if t <= 0:
            continue
        by.setdefault(classify(e.key), []).append((t, e.key))
    total = sum(t for rows in by.values() for t, _ in rows) / 1000.0 / steps
    print(f"\n{variant}: kernel time {total:.2f} ms/step, step {wall_ms:.2f} ms (events, under the profiler)")
    print(f"  {'class':<34} {'ms/step':>8} {'share':>6}  top kernel")
    outside = 0.0
    for cls, _ in CLASSES:
        rows = sorted(by.get(cls, []), reverse=True)
        if not rows:
            continue
        ms = sum(t for t, _ in rows) / 1000.0 / steps
        if cls not in ("matrix products", "attention"):
            outside += ms
        print(f"  {cls:<34} {ms:8.2f} {100 * ms / total:5.1f}%  {rows[0][1][:60]}")
    print(f"  outside matrix products and attention: {outside:.2f} ms/step ({100 * outside / total:.1f}% of kernel time)")
    return total, outside


def main():
    if len(sys.argv) < 8:
        print(__doc__)
        sys.exit(2)
    peer, args = sys.argv[1], sys.argv[2:8]
    variants = sys.argv[8:] or ["sdpa", "compile"]
    steps = 10
    summary = []
    for v in variants:
        total, outside = run(peer, args, v, steps)
        summary.append((v, total, outside))
    print()
    for v, total, outside in summary:
        print(f"profile {v}: kernels {total:.2f} ms/step, {outside:.2f} outside GEMM+attention "
              f"({100 * outside / total:.1f}%)")


if __name__ == "__main__":
    main()
