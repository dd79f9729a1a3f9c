"""graphcore's unit-scaling and scaleinv's u-mup on the same small GPT at init: per-tensor RMS and FP8 underflow (issue 59).

The model is scaleinv's zoo GPT (`--model gpt`, engine/models/gpt.cpp): byte vocabulary 256, learned token and
position embeddings, depth 2 pre-LN blocks (LayerNorm with a gain, no bias), causal attention with
head dimension 16 (width/16 heads) and one fused [3d, d] q/k/v matmul, a GELU MLP of ratio 4, a final
LayerNorm and an untied readout; 8 x 32 KJV bytes (the training split's batch 0, drawn here exactly as
src/engine/data/text_data.cpp draws it), seed 0, widths 64 and 256.

  (a) unit-scaling 0.3.5 as installed from PyPI: the same architecture written with its own layers, as a
      user of the library writes a model it does not ship (uu.Embedding, uu.LayerNorm(affine, no bias),
      uu.MHSA, uu.Linear, uu.GELU, uu.LinearReadout, U.add for token + position, U.residual_split /
      U.residual_add with the library's transformer_residual_scaling_rule taus, U.cross_entropy), every
      argument at its default: that is u-muP at init (unit-variance weights, its default multipliers 1).
  (b) scaleinv's CLI under `--param u-mup`: `scaleinv scales` (the RMS of every op's output and of the
      gradient at it, of every weight and weight gradient) and `scaleinv precision --formats fp8` for
      one step at optim.lr = 0 (each linear's input and weight rounded to E4M3, its output gradient to
      E5M2, each counted). The Python `scaleinv.apply` refuses u-mup on a plain torch model (its ops
      are plain torch ops), so the zoo GPT is the one way scaleinv runs a transformer under u-mup; the
      unit-scaling side is therefore built to match it, not the other way round. unit-scaling's own
      TransformerDecoder (RMSNorm without gains, SwiGLU, no positions) has no scaleinv counterpart.

Both sides measure the same tensors: for every linear its input x, weight w and output gradient, cast
here with torch's float8_e4m3fn / float8_e5m2 (round to nearest even, subnormals; values beyond the
format's largest finite are counted as saturated and clamped first). Underflow = values nonzero in fp32
that become 0. As scaleinv's precision run counts the forward of the train batch and of the one
validation batch (both at init: lr 1e-30, the least the config takes, leaves every weight as it was),
side (a) counts the same two forwards. scaleinv's own counts come from its run, in which upstream
roundings are live (loss 1.0005x fp32); side (a) casts fp32 tensors. Output: docs/unit_scaling.md.

    flock /tmp/scaleinv-pip.lock build/venv-torch-newest/bin/pip install unit-scaling==0.3.5
        # on torch 2.14.1 it adds only einops, tabulate, docstring_parser (check: pip install --dry-run)
    PYTHONPATH=python:build/python build/venv-torch-newest/bin/python bench/unit_scaling_peer.py \
        [--widths 64,256] [--depth 2] [--scaleinv build/scaleinv] [--rows all|summary]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
M64 = (1 << 64) - 1
FORMATS = {"e4m3": ("float8_e4m3fn", 448.0), "e5m2": ("float8_e5m2", 57344.0)}


# ---- the batch: scaleinv's KJV windows (src/engine/data/data_detail.h, text_data.cpp), bit for bit ----

def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _mix_key(seed, stream, step):
    k = _splitmix64((seed & M64) ^ 0x5CA1E1B)
    k = _splitmix64(k ^ stream)
    return _splitmix64(k ^ step)


def kjv_batch(split, step, batch, seq_len, seed=0, val_fraction=0.1):
    import torch
    path = os.path.join(os.environ["SCALEINV_DATA_DIR"], "kjv.txt") if os.environ.get("SCALEINV_DATA_DIR") \
        else os.path.join(os.path.expanduser("~"), ".cache", "scaleinv", "kjv.txt")
    data = open(path, "rb").read()
    n_val = math.floor(len(data) * val_fraction)
    seq = data[:len(data) - n_val] if split == "train" else data[len(data) - n_val:]
    starts = len(seq) - seq_len
    state = _mix_key(seed, 0x7121A1A if split == "train" else 0x7A1, step)
    xs, ys = [], []
    for _ in range(batch):
        i = (_splitmix64(state) * starts) >> 64
        state = (state + 1) & M64
        xs.append(list(seq[i:i + seq_len]))
        ys.append(list(seq[i + 1:i + seq_len + 1]))
    return torch.tensor(xs, dtype=torch.int64), torch.tensor(ys, dtype=torch.int64)


# ---- FP8 casts ----

def cast_counts(t, fmt):
    """(nonzero, underflowed, saturated) of t cast to fmt."""
    import torch
    dtype, top = FORMATS[fmt]
    t = t.detach().float()
    nz = t != 0
    sat = t.abs() > top
    c = t.clamp(-top, top).to(getattr(torch, dtype)).float()
    return int(nz.sum()), int((nz & (c == 0)).sum()), int(sat.sum())


# ---- (a) unit-scaling ----

def us_model(width, depth, vocab, seq_len, head_dim):
    import torch
    from torch import nn
    import unit_scaling as uu
    import unit_scaling.functional as U

    class Mlp(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc, self.act, self.proj = uu.Linear(d, 4 * d), uu.GELU(), uu.Linear(4 * d, d)

        def forward(self, x):
            return self.proj(self.act(self.fc(x)))

    class Block(nn.Module):
        def __init__(self, d, heads, tau_attn, tau_mlp):
            super().__init__()
            self.tau_attn, self.tau_mlp = tau_attn, tau_mlp
            self.ln1 = uu.LayerNorm(d, elementwise_affine=True, bias=False)
            self.attn = uu.MHSA(d, heads, is_causal=True)
            self.ln2 = uu.LayerNorm(d, elementwise_affine=True, bias=False)
            self.mlp = Mlp(d)

        def forward(self, h, note):
            r, skip = U.residual_split(h, tau=self.tau_attn)
            h = note("add", U.residual_add(self.attn(self.ln1(r)), skip, tau=self.tau_attn))
            r, skip = U.residual_split(h, tau=self.tau_mlp)
            return note("add", U.residual_add(self.mlp(self.ln2(r)), skip, tau=self.tau_mlp))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            rule = uu.transformer_residual_scaling_rule()
            self.tok_emb, self.pos_emb = uu.Embedding(vocab, width), uu.Embedding(seq_len, width)
            self.blocks = uu.DepthModuleList(
                [Block(width, width // head_dim, rule(2 * i, 2 * depth), rule(2 * i + 1, 2 * depth)) for i in range(depth)])
            self.ln_f = uu.LayerNorm(width, elementwise_affine=True, bias=False)
            self.readout = uu.LinearReadout(width, vocab)
            self.notes = None

        def note(self, name, t):
            if self.notes is not None:
                if name == "add":
                    name = f"add{sum(k.startswith('add') for k, _ in self.notes) + 1}"
                t.retain_grad()
                self.notes.append((name, t))
            return t

        def forward(self, x):
            h = self.note("embed", U.add(self.tok_emb(x), self.pos_emb(torch.arange(x.shape[1]))))
            for i, b in enumerate(self.blocks):
                h = self.note(f"block{i + 1}", b(h, self.note))
            return self.note("logits", self.readout(self.ln_f(h)))

    return Gpt()


def us_weights(model, width):
    """scaleinv's parameter names -> unit-scaling's tensors (the fused qkv split into its q, k, v rows)."""
    out = {"tok_emb.weight": model.tok_emb.weight, "pos_emb.weight": model.pos_emb.weight}
    for i, b in enumerate(model.blocks):
        p = f"blocks.{i}."
        out[p + "ln1.gain"] = b.ln1.weight
        w = b.attn.linear_qkv.weight
        for j, z in enumerate("qkv"):
            out[p + f"attn.{z}.weight"] = (w, slice(j * width, (j + 1) * width))
        out[p + "attn.o.weight"] = b.attn.linear_o.weight
        out[p + "ln2.gain"] = b.ln2.weight
        out[p + "mlp.fc.weight"] = b.mlp.fc.weight
        out[p + "mlp.proj.weight"] = b.mlp.proj.weight
    out["ln_f.gain"] = model.ln_f.weight
    out["readout.weight"] = model.readout.weight
    return out


def rms(t):
    return float(t.detach().double().pow(2).mean().sqrt())


def run_unit_scaling(a, width):
    import torch
    torch.manual_seed(a.seed)
    model = us_model(width, a.depth, 256, a.seq_len, 16)
    # Linear modules under scaleinv's precision names; the op notes under scaleinv's scales names.
    linears, ops = {}, {}
    for i, b in enumerate(model.blocks):
        p = f"blocks.{i}."
        linears[b.attn.linear_qkv] = p + "attn.qkv"
        linears[b.attn.linear_o] = p + "attn.o.weight"
        linears[b.mlp.fc] = p + "mlp.fc.weight"
        linears[b.mlp.proj] = p + "mlp.proj.weight"
        ops[b.attn.linear_qkv] = [("out", p + "attn.q:qkv")]
        ops[b.attn.linear_o] = [("in", p + "attn.q:avg"), ("out", p + "attn.o:out")]
        ops[b.mlp.fc] = [("out", p + "mlp.fc:out")]
        ops[b.mlp.act] = [("out", p + "mlp.fc:gelu")]
        ops[b.mlp.proj] = [("out", p + "mlp.proj:out")]
    linears[model.readout] = "readout.weight"
    ops[model.readout] = [("out", "readout:out")]
    counts = {}  # name:x|w|grad -> [nonzero, underflow, saturated]
    state = {"count": False}

    def add(key, fmt, t):
        c = counts.setdefault(key, [0, 0, 0])
        for k, v in enumerate(cast_counts(t, fmt)):
            c[k] += v

    def hook(mod, inputs, output):
        x = inputs[0]
        if mod in ops and model.notes is not None:
            for where, name in ops[mod]:
                t = x if where == "in" else output
                if where == "in" and not t.requires_grad:
                    continue
                t.retain_grad()
                model.notes.append((name, t))
        if state["count"] and mod in linears:
            name = linears[mod]
            add(name + ":x", "e4m3", x)
            add(name + ":w", "e4m3", mod.weight)
            if output.requires_grad:
                output.register_hook(lambda g, name=name: add(name + ":grad", "e5m2", g))
                if name.endswith("attn.qkv"):  # the same without the first query position (see the note)
                    output.register_hook(lambda g, name=name: add(name + ":grad t>=1", "e5m2", g[:, 1:]))

    for m in set(linears) | set(ops):
        m.register_forward_hook(hook)
    x, y = kjv_batch("train", 0, a.batch, a.seq_len, seed=a.seed)
    import unit_scaling.functional as U
    model.notes = []
    state["count"] = True
    logits = model(x)
    loss = U.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    notes, model.notes = model.notes, None
    with torch.no_grad():  # the validation batch's forward, as scaleinv's run counts it
        xv, _ = kjv_batch("val", 0, a.batch, a.seq_len, seed=a.seed)
        model(xv)
    state["count"] = False
    rows = {}
    for name, t in notes:
        rows[("fwd", name)] = rms(t)
        rows[("grad", name)] = rms(t.grad) if t.grad is not None else float("nan")
    for name, w in us_weights(model, width).items():
        if isinstance(w, tuple):
            w, sl = w
            rows[("W", name)], rows[("W'", name)] = rms(w[sl]), rms(w.grad[sl])
        else:
            rows[("W", name)], rows[("W'", name)] = rms(w), rms(w.grad)
    return {"loss": float(loss.detach()), "rms": rows, "under": counts}


# ---- (b) scaleinv's CLI ----

def run_scaleinv(a, widths):
    tmp = tempfile.mkdtemp(prefix="unit_scaling_peer_")
    common = ["--set", "model.kind=\"gpt\"", "--set", f"model.depth={a.depth}", "--set", f"model.seq_len={a.seq_len}",
              "--set", "param.name=\"u-mup\"", "--set", "data.source=\"kjv\"", "--set", f"train.batch_size={a.batch}"]
    t0 = time.perf_counter()
    out = os.path.join(tmp, "scales.json")
    subprocess.run([a.scaleinv, "--threads", "1", "scales", "--model", "gpt", "--param", "u-mup", "--seed", str(a.seed),
                    "--widths", ",".join(map(str, widths)), "--depths", str(a.depth), "--json", out] + common,
                   check=True, stdout=subprocess.DEVNULL)
    sc = json.load(open(out))
    res = {}
    for k, w in enumerate(widths):
        rows = {(r["kind"], r["name"]): (r["rms"][k] if r["rms"][k] is not None else float("nan")) for r in sc["rows"]}
        pj = os.path.join(tmp, f"precision{w}.json")
        subprocess.run([a.scaleinv, "--threads", "1", "precision", "--formats", "fp8", "--quiet", "--json", pj,
                        "--set", f"model.width={w}", "--set", "optim.lr=1e-30", "--set", "train.steps=1",
                        "--set", "train.eval_batches=1", "--set", f"train.seed={a.seed}",
                        "--set", f"train.out_dir=\"{os.path.join(tmp, 'run')}\""] + common,
                       check=True, stdout=subprocess.DEVNULL)
        run = [r for r in json.load(open(pj))["runs"] if r["format"] == "fp8"][0]
        under = {n: [c["nonzero"], c["underflow"] * c["nonzero"], c["saturated"] * c["nonzero"]]
                 for n, c in run["tensors"].items()}
        res[w] = {"loss": sc["loss"][k], "rms": rows, "under": under}
    return res, time.perf_counter() - t0


# ---- report ----

def fmt_rms(v):
    return "-" if v is None or math.isnan(v) else f"{v:.3g}"


def frac(c):
    return c[1] / c[0] if c and c[0] else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--widths", default="64,256")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scaleinv", default=os.path.join(ROOT, "build", "scaleinv"))
    p.add_argument("--rows", choices=["all", "summary"], default="all")
    a = p.parse_args()
    import torch
    import unit_scaling
    torch.set_num_threads(1)
    widths = [int(w) for w in a.widths.split(",")]
    si, si_wall = run_scaleinv(a, widths)
    t0 = time.perf_counter()
    us = {w: run_unit_scaling(a, w) for w in widths}
    us_wall = time.perf_counter() - t0
    print(f"unit-scaling {unit_scaling.__version__} (u-muP layers, defaults) vs scaleinv --param u-mup; torch {torch.__version__}")
    print(f"GPT depth {a.depth}, head dim 16, vocab 256, {a.batch} x {a.seq_len} KJV bytes (train batch 0), seed {a.seed};"
          f" loss at init: " + ", ".join(f"w{w} scaleinv {si[w]['loss']:.4f} unit-scaling {us[w]['loss']:.4f}" for w in widths))

    # RMS table: the rows both sides have, in scaleinv's order.
    keys = [k for k in si[widths[0]]["rms"] if k in us[widths[0]]["rms"]]
    only_si = [k for k in si[widths[0]]["rms"] if k not in us[widths[0]]["rms"]]
    if a.rows == "all":
        head = f"{'kind':5} {'tensor':26}" + "".join(f"  {'si w' + str(w):>8} {'us w' + str(w):>8}" for w in widths)
        print("\nRMS at init (si = scaleinv u-mup, us = unit-scaling; unit scaling's aim: 1)")
        print(head)
        print("-" * len(head))
        for k in keys:
            print(f"{k[0]:5} {k[1]:26}" + "".join(f"  {fmt_rms(si[w]['rms'][k]):>8} {fmt_rms(us[w]['rms'][k]):>8}" for w in widths))
        if only_si:
            print("(scaleinv only, not compared: " + ", ".join(f"{k[0]} {k[1]}" for k in only_si) + ")")

    ukeys = sorted(set(si[widths[0]]["under"]) & set(us[widths[0]]["under"]),
                   key=lambda n: (n.split(":")[1] != "x", n.split(":")[1] != "w", n))
    if a.rows == "all":
        head = f"{'tensor (E4M3 x, w; E5M2 grad)':34}" + "".join(f"  {'si w' + str(w):>8} {'us w' + str(w):>8}" for w in widths)
        print("\nFP8 underflow at init, % of nonzero values (x, w: E4M3; grad: E5M2)")
        print(head)
        print("-" * len(head))
        for n in ukeys:
            print(f"{n:34}" + "".join(f"  {100 * frac(si[w]['under'][n]):8.3f} {100 * frac(us[w]['under'][n]):8.3f}" for w in widths))

    if a.rows == "all":
        notes = [f"{n} {100 * frac(us[w]['under'][n + ' t>=1']):.3f}% at w{w}" for w in widths for n in ukeys
                 if n + " t>=1" in us[w]["under"]]
        print("note: unit-scaling's qkv gradient without query position 0 (one visible key: its q gradient is 0 in"
              " exact arithmetic, round-off < 1e-6 from torch's attention, which scaleinv's attention leaves at 0): "
              + "; ".join(notes))

    print("\nsummary (over the compared rows; |log2 RMS| = 0 is RMS 1, 1 is a factor 2)")
    head = f"{'width':>5} {'tool':13} {'median |log2 RMS|':>17} {'fwd':>6} {'grad':>6} {'W':>6} {'W_grad':>6} {'in [1/2,2]':>10}  {'worst tensor (RMS)':34} {'mean underflow':>14} {'worst underflow':>30} {'saturated':>9}"
    print(head)
    print("-" * len(head))
    summary = {}
    for w in widths:
        for tool, r in (("scaleinv", si[w]), ("unit-scaling", us[w])):
            logs = {k: abs(math.log2(r["rms"][k])) for k in keys if r["rms"][k] and not math.isnan(r["rms"][k])}
            med = statistics.median(logs.values())
            per = {kind: statistics.median([v for k, v in logs.items() if k[0] == kind]) for kind in ("fwd", "grad", "W", "W'")}
            inband = sum(v <= 1 for v in logs.values())
            worst = max(logs, key=logs.get)
            fr = {n: frac(r["under"][n]) for n in ukeys}
            mean_u = statistics.mean(fr.values())
            wu = max(fr, key=fr.get)
            sat = sum(r["under"][n][2] for n in ukeys)
            summary[(w, tool)] = dict(median=med, worst=worst, mean_under=mean_u)
            print(f"{w:5} {tool:13} {med:17.3f} {per['fwd']:6.3f} {per['grad']:6.3f} {per['W']:6.3f} {per[chr(87) + chr(39)]:6.3f}"
                  f" {inband:>4}/{len(logs):<5}  {worst[0] + ' ' + worst[1] + ' (' + fmt_rms(r['rms'][worst]) + ')':34}"
                  f" {100 * mean_u:13.3f}% {wu + ' ' + format(100 * fr[wu], '.3f') + '%':>30} {int(sat):>9}")
    print(f"\nwall: scaleinv CLI (scales + precision per width) {si_wall:.2f} s, unit-scaling {us_wall:.2f} s")


if __name__ == "__main__":
    main()
