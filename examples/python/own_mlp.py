"""Your own model under muP from Python: the muP paper's MLP written in plain PyTorch (three
nn.Linear, ReLU, no bias), its coordinate check under mup and under standard, judged against the
theory by scaleinv's C++ core. Run after `bash scripts/setup.sh`:

    build/venv/bin/python examples/python/own_mlp.py [--widths 128,256,...,8192] [--seeds 5]   (~80 s on one core)
"""
import argparse
import time

import torch
from torch import nn

import scaleinv


def mlp(width, d_in=784, classes=10):
    return nn.Sequential(nn.Linear(d_in, width, bias=False), nn.ReLU(),
                         nn.Linear(width, width, bias=False), nn.ReLU(),
                         nn.Linear(width, classes, bias=False))


def main():
    ap = argparse.ArgumentParser()
    # The widths and seeds of the CLI's check of this MLP (docs/coordcheck.md): at 128..1024 with 3
    # seeds the 1/d finite-width terms of h' and W' at step 2 are not resolved and mup fails there.
    ap.add_argument("--widths", default="128,256,512,1024,2048,4096,8192")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    g = torch.Generator().manual_seed(0)
    # A small probe batch: the tolerance's finite-size term is sharp only for n_probe + n_out << the
    # smallest width (src/engine/coordcheck/coordcheck.h); with 64 samples and width 128 it is not.
    batch = (torch.randn(a.batch, 784, generator=g), torch.randint(0, 10, (a.batch,), generator=g))

    # 1. apply: rescale a model's init in place and get its optimizer (one group per tensor).
    torch.manual_seed(0)
    model = mlp(1024)
    opt = scaleinv.apply(model, base=mlp(128), delta=mlp(256), param="mup", optimizer="adamw", lr=1e-2)
    for gr in opt.param_groups:
        print(f"{gr['name']:10s} role {gr['role']:9s} lr {gr['lr']:.3g}  eps {gr['eps']:.3g}")

    # 2. the coordinate check, judged against the theory, under mup and under standard.
    for param in ("mup", "standard"):
        t0 = time.time()
        r = scaleinv.coordcheck(mlp, widths=widths, batches=[batch], param=param, optimizer="adamw", lr=1e-2,
                                steps=3, seeds=a.seeds, plot=a.plot or None)
        rows = [row for row in r.rows if row["quantity"] in ("dh", "dW") and row["step"] == 1]
        print(f"\n{param}: {'PASS' if r.passed else 'FAIL'} ({time.time() - t0:.1f} s)")
        print(f"  {'quantity':8s} {'module':9s} {'measured':>8s} {'predicted':>9s}  verdict")
        for row in rows:
            pred = "-" if row["predicted"] is None else f"{row['predicted']:g}"
            ok = "ok" if row["matches"] in (True, None) and row["stable"] in (True, None) else "FAILED"
            print(f"  {row['quantity']:8s} {row['module']:9s} {row['measured']:+8.2f} {pred:>9s}  {ok}")
        for f in r.failures:
            print("  " + f)


if __name__ == "__main__":
    main()
