"""The coordinate check at a large LR: where a row's slope misses the theory by a finite-width term.

At AdamW lr 1e-2 some mup rows at steps 2-3 miss their exponent over widths 64..1024 while the
slope between neighbouring widths walks toward it as the width grows: a finite-width term whose
size grows with the feature-learning strength (docs/coordcheck.md, ref. [finite-width] in
docs/references.md). The check gives every width row over >= 4 widths that misses a second look,
ln RMS = a + e ln d + c/d per seed, and marks the rows it explains "yes*". This script runs the
check on one of two models and prints, for every row that missed or was explained, the local slope
per width doubling at each step, so the convergence can be seen:

    python examples/python/finite_width.py --model tied-gpt     # the test suite's tied GPT
    python examples/python/finite_width.py --model convnext     # torchvision's ConvNeXt

tied-gpt is `TiedGPT` of tests/python/test_real_modules.py (a nanoGPT-style GPT, 2 blocks, tied
readout), on 4 x 16 tokens; convnext is torchvision's
ConvNeXt([CNBlockConfig(w, 2w, 1), CNBlockConfig(2w, None, 1)]) on 8 images of 32 x 32. Both run
10 seeds, 3 steps, mup by default (--param standard for the other side).
"""
import argparse
import math
import os
import sys
import time

import torch

import scaleinv

HERE = os.path.dirname(os.path.abspath(__file__))


def tied_gpt():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
    from test_real_modules import TiedGPT, lm_loss, tokens
    return (lambda d: TiedGPT(d)), [tokens()], lm_loss, "64,128,256,512,1024"


def convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (8,), generator=g)
    make = lambda w: ConvNeXt([CNBlockConfig(w, 2 * w, 1), CNBlockConfig(2 * w, None, 1)], num_classes=10)
    return make, [(x, y)], None, "32,64,128,256,512"


def local_slopes(result, quantity, layer):
    """Per step, the slope of the seed-mean ln RMS between neighbouring widths."""
    widths = result.json["widths"]
    by_width = {w: [] for w in widths}
    for run in result.json["runs"]:
        for s in run["series"]:
            if s["quantity"] == quantity and s["layer"] == layer:
                by_width[run["width"]].append(s["rms"])
    steps = len(by_width[widths[0]][0])
    out = []
    for t in range(steps):
        means = [sum(math.log(v[t]) for v in by_width[w]) / len(by_width[w]) for w in widths]
        out.append([(means[i + 1] - means[i]) / math.log(widths[i + 1] / widths[i]) for i in range(len(widths) - 1)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["tied-gpt", "convnext"], default="tied-gpt")
    ap.add_argument("--param", default="mup")
    ap.add_argument("--widths", help="default: 64..1024 (tied-gpt), 32..512 (convnext)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    make, batches, loss, widths = (tied_gpt if a.model == "tied-gpt" else convnext)()
    widths = [int(w) for w in (a.widths or widths).split(",")]
    t0 = time.time()
    r = scaleinv.coordcheck(make, widths=widths, batches=batches, param=a.param, optimizer="adamw", lr=a.lr,
                            steps=3, seeds=a.seeds, loss=loss, progress=False,
                            quantities=["h", "dh", "h'", "W'", "dW"])
    print(f"{a.model} under {a.param}, AdamW lr {a.lr:g}, widths {widths}, {a.seeds} seeds: "
          f"{'PASS' if r.passed else 'FAIL'} ({time.time() - t0:.0f} s)")
    for line in r.text.splitlines():
        if line.startswith("summary:"):
            print(line)
    for f in r.failures:
        print("  miss:", f)
    shown = set()
    for row in r.rows:
        pf = row["past_finite_width"]
        if not pf or (row["module"], row["quantity"]) in shown:
            continue
        shown.add((row["module"], row["quantity"]))
        print(f"{row['quantity']} {row['module']} (predicted {row['predicted']:+g}), local slope per doubling:")
        for t, slopes in enumerate(local_slopes(r, row["quantity"], row["module"])):
            if t == 0 and row["quantity"] in ("dh", "dW"):
                continue
            print(f"  step {t}: " + " ".join(f"{s:+.2f}" for s in slopes))
    for row in r.rows:
        pf = row["past_finite_width"]
        if pf:
            verdict = "yes*" if pf["matches"] else "miss"
            print(f"  {verdict}: {row['quantity']} {row['module']} step {row['step']}: slope {row['measured']:+.3f}; "
                  f"past the 1/d term e = {pf['e']:+.3f} +- {pf['e_half_width']:.3f}, c = {pf['c']:+.1f} +- "
                  f"{pf['c_half_width']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
