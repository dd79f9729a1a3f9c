"""microsoft/mup's coordinate check and scaleinv's, on the same MLP, on this machine (issue 15).

The muP paper's MLP (784 -> w -> w -> 10, ReLU, no bias) at widths 2^7..2^13, Adam lr 1e-2, 3 steps,
5 seeds, one fixed Gaussian batch (every step trains on it, as both checks do by default):

  1. microsoft/mup's get_coord_data (its own model: MuReadout head, set_base_shapes, MuAdam), run
     from a source checkout you give (`--mup-src`; mup is not vendored here): the mean |coordinate|
     (l1) of every module's output at steps 1..3 (their t = 1 is before the first update);
  2. scaleinv.coordcheck on the plain three-nn.Linear MLP under mup (the table's row applied by
     scaleinv.apply), the same batch: RMS of every module's output at steps 0..2;
  3. the log-log slope of each against width, side by side (l1 and RMS of a Gaussian-like vector
     scale alike), and both wall times, plus the CLI's `scaleinv coordcheck --model mlp` on the same
     grid.

    apt-get install python3-pandas          # mup's get_coord_data returns a DataFrame
    build/venv/bin/python bench/mup_peer.py --mup-src PATH/TO/mup [--widths 128,...,8192] [--seeds 5]
"""
import argparse
import math
import os
import subprocess
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def slope(widths, values):
    xs = [math.log(w) for w in widths]
    ys = [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def plain_mlp(width, d_in=784, classes=10):
    return nn.Sequential(nn.Linear(d_in, width, bias=False), nn.ReLU(),
                         nn.Linear(width, width, bias=False), nn.ReLU(),
                         nn.Linear(width, classes, bias=False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mup-src", required=True, help="a checkout of github.com/microsoft/mup (the folder holding mup/)")
    ap.add_argument("--widths", default="128,256,512,1024,2048,4096,8192")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads for both peers (default: every core; "
                    "Debian's torch starts with 1 here)")
    ap.add_argument("--python-all", action="store_true", help="also time scaleinv.coordcheck with all 7 quantities")
    a = ap.parse_args()
    torch.set_num_threads(a.threads or os.cpu_count())
    sys.path.insert(0, os.path.abspath(a.mup_src))
    try:
        from mup import MuReadout, set_base_shapes
        from mup.coord_check import get_coord_data
    except ImportError as e:
        sys.exit(f"error: --mup-src: cannot import mup from {a.mup_src}: {e} "
                 "(fix: give a microsoft/mup checkout; apt-get install python3-pandas python3-yaml)")
    import scaleinv

    widths = [int(w) for w in a.widths.split(",")]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.batch, 784, generator=g)
    y = torch.randint(0, 10, (a.batch,), generator=g)

    def mup_mlp(width):
        return nn.Sequential(nn.Linear(784, width, bias=False), nn.ReLU(),
                             nn.Linear(width, width, bias=False), nn.ReLU(),
                             MuReadout(width, 10, bias=False, readout_zero_init=False))

    def lazy(width):
        def make():
            m = mup_mlp(width)
            set_base_shapes(m, mup_mlp(widths[0]), delta=mup_mlp(2 * widths[0]))
            return m
        return make

    t0 = time.time()
    df = get_coord_data({w: lazy(w) for w in widths}, [(x, y)], optimizer="adam", lr=a.lr, nseeds=a.seeds,
                        nsteps=3, mup=True, cuda=False, show_progress=False)
    t_mup = time.time() - t0
    mean = df.groupby(["module", "t", "width"])["l1"].mean()

    t0 = time.time()
    r = scaleinv.coordcheck(plain_mlp, widths=widths, batches=[(x, y)], param="mup", optimizer="adam", lr=a.lr,
                            steps=2, seeds=a.seeds, progress=False, quantities=["h", "dh"])
    t_ours_h = time.time() - t0
    ours = {(row["module"], row["step"]): row for row in r.rows if row["quantity"] == "h"}

    print(f"MLP 784 -> w -> w -> 10, widths {widths[0]}..{widths[-1]}, {a.seeds} seeds, Adam lr {a.lr:g}, "
          f"batch {a.batch}: slope of each module's output against width")
    print(f"  {'module':6s} {'step':>4s} {'mup (l1)':>9s} {'scaleinv (RMS)':>15s} {'predicted':>9s} {'diff':>6s}")
    worst = 0.0
    for module in ("0", "2", "4"):
        for t in (1, 2, 3):
            s_mup = slope(widths, [mean[(module, t, w)] for w in widths])
            row = ours.get((module, t - 1))
            if row is None:
                continue
            pred = "-" if row["predicted"] is None else f"{row['predicted']:g}"
            worst = max(worst, abs(s_mup - row["measured"]))
            print(f"  {module:6s} {t - 1:4d} {s_mup:+9.3f} {row['measured']:+15.3f} {pred:>9s} "
                  f"{s_mup - row['measured']:+6.3f}")
    print(f"  largest difference {worst:.3f}; scaleinv's verdict: {'PASS' if r.passed else 'FAIL'}")

    t_ours_all = None
    if a.python_all:
        t0 = time.time()
        scaleinv.coordcheck(plain_mlp, widths=widths, batches=[(x, y)], param="mup", optimizer="adam", lr=a.lr,
                            steps=3, seeds=a.seeds, progress=False)
        t_ours_all = time.time() - t0
    exe = os.environ.get("SCALEINV_BIN", os.path.join(HERE, "..", "build", "scaleinv"))
    cli = {}
    for label, q in (("all 7 quantities", "all"), ("h, dh, h', W', dW", "h,dh,hgrad,wgrad,dw")):
        t0 = time.time()
        out = subprocess.run([exe, "coordcheck", "--model", "mlp", "--param", "mup", "--optimizer", "adam",
                              "--lr", str(a.lr), "--widths", ",".join(map(str, widths)), "--seeds", str(a.seeds),
                              "--steps", "3", "--quiet", "--quantities", q, "--set", f"train.batch_size={a.batch}"],
                             capture_output=True, text=True)
        cli[label] = (time.time() - t0, out.returncode, out.stdout.strip().splitlines()[-1:] or out.stderr.strip())
    print(f"\nwall time, the same grid ({len(widths)} widths x {a.seeds} seeds, 3 steps, batch {a.batch}, "
          f"{torch.get_num_threads()} threads):")
    print(f"  microsoft/mup get_coord_data (l1 of outputs)           {t_mup:7.1f} s")
    print(f"  scaleinv.coordcheck, Python, h and dh                 {t_ours_h:7.1f} s")
    if t_ours_all is not None:
        print(f"  scaleinv.coordcheck, Python, all 7 quantities         {t_ours_all:7.1f} s")
    for label, (t, rc, last) in cli.items():
        print(f"  scaleinv coordcheck --model mlp (CLI), {label:18s}{t:7.1f} s   {last}")


if __name__ == "__main__":
    main()
