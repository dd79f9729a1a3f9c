"""What the coordinate-check grid of issue 15 costs before any measurement, on this machine.

The grid: the muP paper's MLP (784 -> w -> w -> 10, ReLU, no bias), widths 2^7..2^13, 5 seeds, 4
forward/backward passes and 3 Adam steps each (steps 0..3), batch 64. Two floors:

  1. the arithmetic: the matmuls every implementation must do (forward, input gradient, weight
     gradient of each layer; the first layer's input gradient is not needed), counted in FLOPs,
     divided by the sgemm rate measured here at the grid's own shapes (64 x w by w x w and the
     w x 64 by 64 x w weight gradient): a lower bound for any implementation on these cores;
  2. a plain PyTorch loop over the grid (nn.Linear, torch.optim.Adam, cross-entropy), measuring
     nothing: what microsoft/mup's get_coord_data and any hook-based check sit on.

    build/venv/bin/python bench/coordcheck_floor.py [--threads 2] [--widths 128,...,8192] [--seeds 5]
"""
import argparse
import time

import torch
from torch import nn


def gemm_rate(m, k, n, reps=5):
    """GFLOPS of (m x k) @ (k x n), best of `reps` after a warm-up, output buffer reused."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - t)
    return 2.0 * m * k * n / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: every core)")
    ap.add_argument("--widths", default="128,256,512,1024,2048,4096,8192")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    widths = [int(w) for w in a.widths.split(",")]
    B, d_in, classes, passes = a.batch, 784, 10, 4

    # 1. The arithmetic floor.
    flops = 0.0
    for w in widths:
        layer = 2 * B * (d_in * w + w * w + w * classes)          # forward
        grad_in = 2 * B * (w * w + w * classes)                    # input gradients (not layer 1's)
        grad_w = 2 * B * (d_in * w + w * w + w * classes)          # weight gradients
        flops += a.seeds * passes * (layer + grad_in + grad_w)
    wmax = max(widths)
    fwd = gemm_rate(B, wmax, wmax)          # activations x weight
    wgrad = gemm_rate(wmax, B, wmax)        # weight gradient: an outer product over the batch
    rate = min(fwd, wgrad)
    print(f"matmuls of the grid: {flops / 1e9:.0f} GFLOP; sgemm here at width {wmax}: "
          f"{fwd:.0f} GFLOPS (64 x w x w), {wgrad:.0f} GFLOPS (w x 64 x w), {torch.get_num_threads()} threads")
    print(f"arithmetic floor: {flops / 1e9 / fwd:.1f} s at the faster rate, {flops / 1e9 / rate:.1f} s at the slower")

    # 2. A plain PyTorch loop, nothing measured.
    x, y = torch.randn(B, d_in), torch.randint(0, classes, (B,))
    t0 = time.perf_counter()
    for w in widths:
        for s in range(a.seeds):
            torch.manual_seed(s)
            m = nn.Sequential(nn.Linear(d_in, w, bias=False), nn.ReLU(), nn.Linear(w, w, bias=False), nn.ReLU(),
                              nn.Linear(w, classes, bias=False))
            opt = torch.optim.Adam(m.parameters(), lr=1e-2)
            for t in range(passes):
                opt.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                if t + 1 < passes:
                    opt.step()
    print(f"plain PyTorch loop over the grid ({len(widths)} widths x {a.seeds} seeds, {passes} passes, "
          f"{passes - 1} Adam steps), nothing measured: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
