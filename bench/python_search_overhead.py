"""What scaleinv.search costs beside the user's training function (issue 41's targets: < 50 ms a
run, and a 100-trial halving search within 1.3x the sum of its training calls).

    build/venv/bin/python bench/python_search_overhead.py [--trials 100] [--steps 270]

A tiny MLP (widths 32) on a fixed batch stream; the search is halving with eta 3 from min_steps
10, so 100 trials train at 10 steps, 33 at 30, 11 at 90 and 3 at 270 (a few ms to ~0.1 s each).
Prints the per-run overhead (wall time less the training calls, over the runs) and the ratio of
the whole search's wall time to the sum of its training calls, in one run. torch's own one-time
import on a process's first optimizer is paid before the clock starts."""
import argparse
import os
import tempfile
import time

import torch
from torch import nn

import scaleinv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--steps", type=int, default=270)
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 16, generator=g), torch.randint(0, 8, (512,), generator=g)

    def make_model(width):
        return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 8))

    def train(model, opt, hp, steps):
        losses = []
        for s in range(steps):
            i = slice((s * 32) % 512, (s * 32) % 512 + 32)
            loss = nn.functional.cross_entropy(model(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    space = {"fixed": {"param": "mup", "steps": a.steps, "width": a.width},
             "search": {"method": "halving", "trials": a.trials, "eta": 3, "min_steps": 10,
                        "space": {"lr_log2": {"from": -12, "to": -3}, "warmup": {"from": 0, "to": 0.3}}}}
    # torch 2.x imports torch._dynamo on the first optimizer a process makes (1.3 s here on torch
    # 2.13): any training script pays it once, with scaleinv or without, so it is paid before the
    # clock starts rather than spread over the runs as if it were the search's.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = scaleinv.search(make_model, train, space, db=os.path.join(d, "s.db"), progress=False)
        wall = time.perf_counter() - t0
    runs = r["run"]
    print(f"runs {runs}, wall {wall:.2f} s, inside train {r['train_s']:.2f} s, "
          f"overhead {1000 * (wall - r['train_s']) / runs:.1f} ms a run, wall / train {wall / r['train_s']:.3f}")


if __name__ == "__main__":
    main()
