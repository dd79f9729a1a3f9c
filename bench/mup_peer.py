"""microsoft/mup's coordinate check and scaleinv's, on the same MLP, on this machine (issues 15, 59).

The muP paper's MLP (784 -> w -> w -> 10, ReLU, no bias) at widths 2^7..2^13, Adam lr 1e-2, 3 steps,
5 seeds, one fixed Gaussian batch of 64 (every step trains on it, as both checks do by default).
Three tools, back to back in one run, each in a fresh process of its own (so none inherits another's
heap, threads or imports), each timed from its call as a user would make it:

  1. microsoft/mup as installed from PyPI (`pip install mup`), its `get_coord_data` on its own model
     (MuReadout head, set_base_shapes, MuAdam): the mean |coordinate| (l1) of every module's output at
     its t = 1..3 (t = 1 is before the first update);
  2. `scaleinv.coordcheck` with its defaults (all seven quantities) on the plain three-nn.Linear MLP
     under mup (the table's row applied by scaleinv.apply), the same batch: steps 0..3;
  3. the CLI's `scaleinv coordcheck --model mlp` with its defaults (all seven quantities), same grid
     and batch size.

Then, for scale, the training alone: the same models built and trained through steps 0..3 with
nothing measured, which bounds any check of those steps.

Then the log-log slope of each module's output against width, mup's l1 beside scaleinv's RMS (a
Gaussian-like vector's l1 and RMS scale alike), and the three wall times with their ratios.

    build/venv/bin/pip install --no-deps mup pandas pyyaml   # mup's own requirements pull torchvision, which
                                                             # would replace the venv's torch
    flock /tmp/scaleinv-build.lock build/venv/bin/python bench/mup_peer.py [--repeat 2] [--widths 128,...,8192]
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ("0", "2", "4")
FIVE = ["h", "dh", "h'", "W'", "dW"]  # the defaults less the two spectral norms (--no-five leaves these runs out)


def slope(widths, values):
    xs = [math.log(w) for w in widths]
    ys = [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def batch(n):
    import torch
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g)


def plain_mlp(width, d_in=784, classes=10):
    from torch import nn
    return nn.Sequential(nn.Linear(d_in, width, bias=False), nn.ReLU(),
                         nn.Linear(width, width, bias=False), nn.ReLU(),
                         nn.Linear(width, classes, bias=False))


def run_mup(a, widths):
    import torch
    from torch import nn
    from mup import MuReadout, set_base_shapes
    from mup.coord_check import get_coord_data

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

    x, y = batch(a.batch)
    t0 = time.perf_counter()
    df = get_coord_data({w: lazy(w) for w in widths}, [(x, y)], optimizer="adam", lr=a.lr, nseeds=a.seeds,
                        nsteps=3, mup=True, cuda=False, show_progress=False)
    wall = time.perf_counter() - t0
    mean = df.groupby(["module", "t", "width"])["l1"].mean()
    slopes = {f"{m}/{t - 1}": slope(widths, [float(mean[(m, t, w)]) for w in widths]) for m in MODULES for t in (1, 2, 3)}
    import mup
    return {"wall": wall, "slopes": slopes, "version": __import__("importlib.metadata").metadata.version("mup"), "path": mup.__file__,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def run_python(a, widths):
    import torch
    import scaleinv
    from scaleinv import _coordcheck
    x, y = batch(a.batch)
    read = [0]
    gram = _coordcheck._gram_mv

    def counted(m, v):  # bytes one product m^T (m v) reads: one pass over m
        read[0] += m.numel() * m.element_size()
        return gram(m, v)
    _coordcheck._gram_mv = counted
    t0 = time.perf_counter()
    r = scaleinv.coordcheck(plain_mlp, widths=widths, batches=[(x, y)], param="mup", optimizer="adam", lr=a.lr,
                            steps=3, seeds=a.seeds, progress=False, quantities=FIVE if a.five else None)
    wall = time.perf_counter() - t0
    slopes = {f"{row['module']}/{row['step']}": row["measured"] for row in r.rows
              if row["quantity"] == "h" and row["module"] in MODULES}
    predicted = {f"{row['module']}/{row['step']}": row["predicted"] for row in r.rows
                 if row["quantity"] == "h" and row["module"] in MODULES}
    quantities = sorted({row["quantity"] for row in r.rows})
    return {"wall": wall, "slopes": slopes, "predicted": predicted, "passed": r.passed, "rows": len(r.rows),
            "failures": r.failures, "quantities": quantities, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "norm_gb": read[0] / 1e9}


def run_cli(a, widths):
    exe = os.environ.get("SCALEINV_BIN", os.path.join(HERE, "..", "build", "scaleinv"))
    cmd = [exe, "coordcheck", "--model", "mlp", "--param", "mup", "--optimizer", "adam", "--lr", str(a.lr),
           "--widths", ",".join(map(str, widths)), "--seeds", str(a.seeds), "--steps", "3", "--quiet",
           "--set", f"train.batch_size={a.batch}"] + (["--quantities", "h,dh,hgrad,wgrad,dw"] if a.five else [])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = out.stdout.strip().splitlines()
    summary = next((l for l in lines if l.startswith("summary:")), "")
    return {"wall": wall, "rc": out.returncode, "summary": summary, "last": lines[-1:] or [out.stderr.strip()],
            "cmd": " ".join(["build/scaleinv"] + cmd[1:])}


def child(a, widths):
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    a.five = a.only.endswith("5")
    res = {"mup": run_mup, "python": run_python, "cli": run_cli, "train": run_training}[a.only.rstrip("5")](a, widths)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN if a.only == "cli" else resource.RUSAGE_SELF)
    res["cpu_s"] = ru.ru_utime + ru.ru_stime
    json.dump(res, open(a.json, "w"))


def mv_bandwidth():
    """GB/s of torch.mv on a width-8192 square matrix (best of 5): what one pass over a matrix costs."""
    import torch
    n = 8192
    w, v = torch.randn(n, n), torch.randn(n)
    torch.mv(w, v)
    best = min(_timed(lambda: torch.mv(w, v)) for _ in range(5))
    return 4.0 * n * n / best / 1e9


def run_training(a, widths):
    """The training every check of steps 0..3 does, with nothing measured: per width and seed the
    plain MLP built (torch's init), 4 forward and backward passes (steps 0..3) and 3 Adam steps
    (torch's fused kernel, as scaleinv.coordcheck uses), the imports before the clock; mup's
    get_coord_data does 3 and 3. A check that trains through steps 0..3 with torch's kernels cannot
    run faster than this, whatever it measures."""
    import torch
    x, y = batch(a.batch)
    warm = torch.nn.Parameter(torch.zeros(2))  # the first Adam step's imports (torch._dynamo, ~1 s) off the clock
    warm.grad = torch.ones(2)
    torch.optim.Adam([warm], fused=True).step()
    t0 = time.perf_counter()
    for w in widths:
        for seed in range(a.seeds):
            torch.manual_seed(seed)
            model = plain_mlp(w)
            opt = torch.optim.Adam(model.parameters(), lr=a.lr, fused=True)
            for t in range(4):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                if t < 3:
                    opt.step()
            del model, opt
    return {"wall": time.perf_counter() - t0}


def _timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def one_round(a, widths, k):
    out = {}
    for tool in ("mup", "python", "cli") + (() if a.no_five else ("python5", "cli5", "train")):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        load = os.getloadavg()[0]
        cmd = [sys.executable, os.path.abspath(__file__), "--only", tool, "--json", path, "--widths", a.widths,
               "--seeds", str(a.seeds), "--batch", str(a.batch), "--lr", str(a.lr), "--threads", str(a.threads)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"error: the {tool} run failed:\n{p.stderr.strip()[-2000:]}")
        out[tool] = json.load(open(path))
        out[tool]["load_before"] = load
        os.unlink(path)
        print(f"  round {k} {tool:6s} {out[tool]['wall']:6.1f} s (load average before {load:.2f})", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="128,256,512,1024,2048,4096,8192")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads in the two Python runs (default: torch's, "
                    "every core); the CLI uses its own default (every core)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the three, back to back")
    ap.add_argument("--no-five", action="store_true", help="leave out the two runs without the spectral norms")
    ap.add_argument("--only", choices=("mup", "python", "cli", "python5", "cli5", "train"), help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    if a.only:
        return child(a, widths)
    print(f"MLP 784 -> w -> w -> 10, widths {widths[0]}..{widths[-1]}, {a.seeds} seeds, 3 steps, Adam lr {a.lr:g}, "
          f"batch {a.batch}; {os.cpu_count()} cores; each tool in a fresh process, back to back", flush=True)
    rounds = [one_round(a, widths, k + 1) for k in range(a.repeat)]

    r = rounds[0]
    m, p, c = r["mup"], r["python"], r["cli"]
    print(f"\nmup {m['version']} from {m['path']} (PyPI), torch {m['torch']}, {m['threads']} threads; "
          f"scaleinv.coordcheck: torch {p['torch']}, {p['threads']} threads, quantities {', '.join(p['quantities'])}")
    print("slope of each module's output against width (round 1):")
    print(f"  {'module':6s} {'step':>4s} {'mup (l1)':>9s} {'scaleinv (RMS)':>15s} {'predicted':>9s} {'diff':>6s}")
    worst = 0.0
    for mod in MODULES:
        for t in (0, 1, 2):
            key = f"{mod}/{t}"
            s_mup, s_ours, pred = m["slopes"][key], p["slopes"].get(key), p["predicted"].get(key)
            if s_ours is None:
                continue
            worst = max(worst, abs(s_mup - s_ours))
            ptxt = "-" if pred is None else f"{pred:g}"
            print(f"  {mod:6s} {t:4d} {s_mup:+9.3f} {s_ours:+15.3f} {ptxt:>9s} {s_mup - s_ours:+6.3f}")
    print(f"  largest difference {worst:.3f}; scaleinv.coordcheck: {'PASS' if p['passed'] else 'FAIL'} "
          f"({p['rows']} rows); CLI: {c['summary']}")

    print(f"\nwall time, the same grid ({len(widths)} widths x {a.seeds} seeds, 3 steps, batch {a.batch}); "
          "ratio = mup's time / scaleinv's (target >= 1.5):")
    for k, r in enumerate(rounds, 1):
        m, p, c = r["mup"], r["python"], r["cli"]
        print(f"  round {k}: microsoft/mup get_coord_data (l1 of outputs)      {m['wall']:6.1f} s  "
              f"(cpu {m['cpu_s']:.1f} s, load before {m['load_before']:.2f})")
        print(f"           scaleinv.coordcheck, Python, defaults (7 quantities) {p['wall']:6.1f} s  "
              f"{m['wall'] / p['wall']:.2f}x  (cpu {p['cpu_s']:.1f} s, load before {p['load_before']:.2f})")
        print(f"           scaleinv coordcheck --model mlp (CLI), defaults (7)  {c['wall']:6.1f} s  "
              f"{m['wall'] / c['wall']:.2f}x  (cpu {c['cpu_s']:.1f} s, load before {c['load_before']:.2f})")
        if "python5" in r:
            p5, c5 = r["python5"], r["cli5"]
            print(f"           without ||W||, ||dW|| (5 quantities): Python {p5['wall']:6.1f} s  "
                  f"{m['wall'] / p5['wall']:.2f}x; CLI {c5['wall']:6.1f} s  {m['wall'] / c5['wall']:.2f}x")
        if "train" in r:
            tr = r["train"]["wall"]
            print(f"           training alone (4 forward-backward, 3 Adam steps a run, nothing measured) {tr:5.1f} s: "
                  f"mup's time / this = {m['wall'] / tr:.2f}x, the most any check of steps 0..3 can reach")
    gbs = mv_bandwidth()
    gb = rounds[0]["python"]["norm_gb"]
    print(f"the Python check's spectral norms (||W||, ||dW||, stopped by convergence) read {gb:.0f} GB: "
          f"{gb / gbs:.1f} s at this machine's {gbs:.1f} GB/s (torch.mv, width 8192)")

if __name__ == "__main__":
    main()
