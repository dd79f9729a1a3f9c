"""LR transfer on your own transformer: a nanoGPT-style GPT written in plain PyTorch (not scaleinv's
zoo), trained through `scaleinv.apply` on KJV bytes at several widths over a log2 LR grid, under
mup and under standard. muP's claim: the optimal LR moves <= 1 doubling from width 64 to 256 under
mup, and more than that under standard (docs/python.md, issue 15).

The model (class GPT): byte vocab 256, learned positional embedding, pre-LayerNorm blocks with causal
self-attention and a 4x GELU MLP, final LayerNorm, an untied lm_head (written untied; scaleinv.apply also plans tied embeddings),
no dropout, nanoGPT's init (N(0, 0.02), residual projections 0.02/sqrt(2 depth), zero biases).
The head dimension is FIXED (d_head = 32, n_head = width/32), so the attention logit scale
1/sqrt(d_head) is the same at every width: muP's 1/d attention rule (the note scaleinv.plan() gives
under mup: "scale attention logits by d_head0^-1/2 (d_head/d_head0)^-1") changes something only when
d_head grows with width. The forward still computes the scale from the plan's attn_logit exponent,
d_head0^-1/2 (d_head/d_head0)^-attn_logit, which is 1/sqrt(32) here under both parameterizations.

Every run: `scaleinv.apply(model, base=GPT(64), delta=GPT(128), param=P, optimizer="adamw", lr=LR,
weight_decay=0)` (betas 0.9/0.95 as nanoGPT), linear warmup then cosine decay to 0.1 LR, no gradient
clipping, the same init per width and the same batches for every run (seeded), one CPU thread. The
loss judged is the held-out loss (the last 10% of the bytes, a fixed set of windows) after the last
step; runs whose loss becomes nan/inf are recorded as diverged. The best log2 LR per (param, width)
is the vertex of a parabola in log2 LR through the best grid point and its two neighbours (the grid
argmin, flagged, when it sits at an edge or a neighbour diverged). Run after `bash scripts/setup.sh`:

    build/venv/bin/python examples/python/nanogpt_transfer.py [--widths 64,128,256] [--lrs=-10:-5]
        [--steps 1000] [--params mup,standard] [--json out.json] [--threads 1]
"""
import argparse
import json
import math
import os
import sys
import time


def _threads_from_argv():
    """--threads has to reach OpenMP/OpenBLAS before torch is imported."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_known_args()[0].threads


if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_threads_from_argv()))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import scaleinv  # noqa: E402

VOCAB = 256
D_HEAD = 32
BASE_WIDTH, DELTA_WIDTH = 64, 128


# --------------------------------------------------------------------------------------------- model
class CausalSelfAttention(nn.Module):
    def __init__(self, width, seq_len, d_head):
        super().__init__()
        assert width % d_head == 0, f"width {width} is not a multiple of d_head {d_head}"
        self.n_head, self.d_head = width // d_head, d_head
        self.c_attn = nn.Linear(width, 3 * width)  # q, k, v fused
        self.c_proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool)), persistent=False)
        self.logit_scale = d_head ** -0.5

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.d_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * self.logit_scale
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width, seq_len, d_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, seq_len, d_head)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, width, depth=2, seq_len=64, d_head=D_HEAD, vocab=VOCAB):
        super().__init__()
        self.seq_len, self.d_head = seq_len, d_head
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq_len, width)
        self.h = nn.ModuleList([Block(width, seq_len, d_head) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)  # untied from wte
        self.emb_mult = self.out_mult = 1.0  # multipliers of the embedding sum and the logits (tuned in
                                             # nanogpt_tune_small_train_big.py; 1 is no multiplication)
        for name, p in self.named_parameters():  # nanoGPT's init
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * depth))
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def set_attn_logit(self, attn_logit, d_head0=D_HEAD):
        """The plan's attention logit rule d_head0^-1/2 (d_head/d_head0)^-attn_logit; with d_head
        fixed (= d_head0) it is 1/sqrt(d_head) whatever the exponent."""
        s = d_head0 ** -0.5 * (self.d_head / d_head0) ** -attn_logit
        for b in self.h:
            b.attn.logit_scale = s
        return s

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        if self.emb_mult != 1.0:
            x = x * self.emb_mult
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        if self.out_mult != 1.0:
            logits = logits * self.out_mult
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------------------------------------- data
def kjv_path():
    """Where scaleinv's CLI caches the KJV text (src/engine/data/kjv.cpp kjv_cache_path)."""
    d = os.environ.get("SCALEINV_DATA_DIR")
    if d:
        return os.path.join(d, "kjv.txt")
    home = os.environ.get("HOME")
    base = os.path.join(home, ".cache") if home else "/tmp"
    return os.path.join(base, "scaleinv", "kjv.txt")


def load_bytes(path=None):
    path = path or kjv_path()
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        sys.exit(f"nanogpt_transfer: no KJV text at {path} (fix: run `build/scaleinv train` once, or "
                 "`bash scripts/setup.sh`, which caches it there)")
    with open(path, "rb") as f:
        raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def split(data, held_out=0.1):
    n = int(len(data) * (1 - held_out))
    return data[:n], data[n:]


def windows(data, offsets, seq_len):
    """(x, y) byte windows starting at offsets: y is x shifted by one byte."""
    ix = offsets[:, None] + torch.arange(seq_len + 1)
    w = data[ix].long()
    return w[:, :-1], w[:, 1:]


def train_offsets(n_bytes, seq_len, steps, batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_bytes - seq_len - 1, (steps, batch), generator=g)


def eval_offsets(n_bytes, seq_len, n_windows):
    return torch.linspace(0, n_bytes - seq_len - 2, n_windows).long()


# --------------------------------------------------------------------------------------------- train
def build(width, param, lr, depth, seq_len, seed, weight_decay=0.0):
    """A GPT at `width` with its init rescaled by scaleinv.apply, and its AdamW."""
    torch.manual_seed(1000 + seed)
    base, delta = GPT(BASE_WIDTH, depth, seq_len), GPT(DELTA_WIDTH, depth, seq_len)
    torch.manual_seed(seed * 7919 + width)  # the same init for every LR at a width
    model = GPT(width, depth, seq_len)
    opt = scaleinv.apply(model, base=base, delta=delta, param=param, optimizer="adamw", lr=lr,
                         weight_decay=weight_decay, betas=(0.9, 0.95))
    model.set_attn_logit(opt.scaleinv_plan["shifted"]["attn_logit"])
    return model, opt


def lr_factor(step, steps, warmup):
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, data, offsets, seq_len, batch):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(offsets), batch):
        x, y = windows(data, offsets[i:i + batch], seq_len)
        tot += float(model(x, y)) * len(x)
        n += len(x)
    model.train()
    return tot / n


def train_run(width, param, lr, train, heldout, offsets, ev_offsets, depth=2, seq_len=64, warmup=100,
              seed=0, log_every=0):
    """One run: {'eval', 'train_last100', 'diverged', 'diverged_step', 'seconds', 'curve'}."""
    model, opt = build(width, param, lr, depth, seq_len, seed)
    steps, batch = offsets.shape
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup))
    t0, losses, curve = time.time(), [], []
    out = {"width": width, "param": param, "lr": lr, "log2_lr": math.log2(lr), "diverged": False}
    for step in range(steps):
        x, y = windows(train, offsets[step], seq_len)
        loss = model(x, y)
        lv = float(loss)
        if not math.isfinite(lv):
            out.update(diverged=True, diverged_step=step, eval=None, train_last100=None)
            break
        losses.append(lv)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if log_every and (step + 1) % log_every == 0:
            curve.append([step + 1, sum(losses[-log_every:]) / len(losses[-log_every:])])
    if not out["diverged"]:
        ev = evaluate(model, heldout, ev_offsets, seq_len, batch)
        if math.isfinite(ev):
            out.update(eval=ev, train_last100=sum(losses[-100:]) / len(losses[-100:]))
        else:
            out.update(diverged=True, diverged_step=steps, eval=None, train_last100=None)
    out.update(seconds=time.time() - t0, curve=curve, initial_loss=losses[0] if losses else None)
    return out


# ------------------------------------------------------------------------------------------- summary
def best_lr(log2_lrs, losses):
    """(best log2 LR, best grid loss, flag): the parabola vertex in log2 LR through the grid argmin and
    its two neighbours, or the grid argmin with a flag when that is not possible."""
    pts = sorted((x, l) for x, l in zip(log2_lrs, losses))
    xs = [p[0] for p in pts]
    ls = [p[1] if p[1] is not None else math.inf for p in pts]
    if all(math.isinf(l) for l in ls):
        return None, None, "all diverged"
    i = min(range(len(ls)), key=lambda j: ls[j])
    if i == 0 or i == len(ls) - 1:
        return xs[i], ls[i], "edge"
    (x0, y0), (x1, y1), (x2, y2) = ((xs[j], ls[j]) for j in (i - 1, i, i + 1))
    if math.isinf(y0) or math.isinf(y2):
        return xs[i], ls[i], "neighbour diverged"
    # Lagrange parabola through three points; vertex -b / 2a.
    d = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / d
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / d
    if a <= 0:
        return xs[i], ls[i], "not convex"
    return min(max(-b / (2 * a), x0), x2), ls[i], ""


def summarize(runs, params, widths):
    rows, shifts = [], {}
    for param in params:
        best = {}
        for w in widths:
            rs = sorted((r for r in runs if r["param"] == param and r["width"] == w), key=lambda r: r["lr"])
            if not rs:
                continue
            x, l, flag = best_lr([r["log2_lr"] for r in rs], [r["eval"] for r in rs])
            best[w] = (x, flag)
            rows.append({"param": param, "width": w, "best_log2_lr": x, "best_loss": l, "flag": flag,
                         "losses": {f"{r['log2_lr']:g}": r["eval"] for r in rs}})
        lo, hi = min(widths), max(widths)
        if lo in best and hi in best and best[lo][0] is not None and best[hi][0] is not None:
            shift = best[hi][0] - best[lo][0]
            ok = abs(shift) <= 1.0 if param != "standard" else abs(shift) > 1.0
            want = "<= 1 doubling" if param != "standard" else "> 1 doubling"
            edge = any(best[w][1] for w in (lo, hi))
            shifts[param] = {"from": lo, "to": hi, "shift_doublings": shift, "criterion": want, "met": ok,
                             "provisional": edge}
    return rows, shifts


def print_summary(rows, shifts, log2_lrs):
    print(f"\n{'param':9s} {'width':>5s}  " + " ".join(f"{x:>6g}" for x in log2_lrs) +
          f"  {'best log2 LR':>12s} {'best loss':>9s}")
    for r in rows:
        cells = []
        for x in log2_lrs:
            v = r["losses"].get(f"{x:g}", "-")
            cells.append(f"{'div':>6s}" if v is None else (f"{v:6.3f}" if isinstance(v, float) else f"{v:>6s}"))
        bx = "-" if r["best_log2_lr"] is None else f"{r['best_log2_lr']:+.2f}"
        bl = "-" if r["best_loss"] is None else f"{r['best_loss']:.4f}"
        print(f"{r['param']:9s} {r['width']:5d}  " + " ".join(cells) + f"  {bx:>12s} {bl:>9s}"
              + (f"  ({r['flag']})" if r["flag"] else ""))
    print("(held-out loss per log2 LR; best log2 LR: parabola vertex through the grid argmin and its neighbours)")
    for param, s in shifts.items():
        verdict = "MET" if s["met"] else "NOT MET"
        note = " (provisional: an optimum sits at a grid edge; extend --lrs)" if s["provisional"] else ""
        print(f"{param}: optimum moves {s['shift_doublings']:+.2f} doublings from width {s['from']} to "
              f"{s['to']}; criterion {s['criterion']}: {verdict}{note}")


def write_json(path, obj):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def parse_lrs(s):
    """'-11:-5' (every integer log2 LR), '-11:-5:0.5' (a step) or a list '-11,-9,-7' of log2 LRs."""
    if ":" in s:
        parts = [float(p) for p in s.split(":")]
        lo, hi, step = parts[0], parts[1], parts[2] if len(parts) > 2 else 1.0
        n = int(round((hi - lo) / step))
        return [lo + i * step for i in range(n + 1)]
    return [float(p) for p in s.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="64,128,256")
    ap.add_argument("--lrs", default="-10:-5", help="log2 LRs: lo:hi[:step] or a comma list")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--params", default="mup,standard")
    ap.add_argument("--json", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="", help="the text file (default: scaleinv's KJV cache)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    widths = [int(w) for w in a.widths.split(",")]
    params = a.params.split(",")
    log2_lrs = parse_lrs(a.lrs)

    data = load_bytes(a.data or None)
    train, heldout = split(data)
    offsets = train_offsets(len(train), a.seq_len, a.steps, a.batch, a.seed)
    ev_offsets = eval_offsets(len(heldout), a.seq_len, a.eval_windows)
    print(f"data: {a.data or kjv_path()} ({len(train)} train bytes, {len(heldout)} held-out bytes); "
          f"depth {a.depth}, seq {a.seq_len}, batch {a.batch}, {a.steps} steps, d_head {D_HEAD}, "
          f"{a.threads} thread(s)")

    notes = {}
    for param in params:
        p = scaleinv.plan(GPT(max(widths), a.depth, a.seq_len), GPT(BASE_WIDTH, a.depth, a.seq_len),
                          GPT(DELTA_WIDTH, a.depth, a.seq_len), param=param)
        roles = {}
        for t in p["tensors"]:
            roles.setdefault(t["role"], []).append(t["name"])
        notes[param] = p["notes"]
        print(f"{param}: roles " + "; ".join(f"{r}: {len(n)}" for r, n in sorted(roles.items()))
              + f"; attn_logit exponent {p['shifted']['attn_logit']:g}")
        for n in p["notes"]:
            print(f"  plan note: {n} -> d_head is fixed at {D_HEAD}, so the scale is 1/sqrt({D_HEAD}) at every width")

    config = {k: v for k, v in vars(a).items()}
    config.update(widths=widths, params=params, log2_lrs=log2_lrs, d_head=D_HEAD, base_width=BASE_WIDTH,
                  delta_width=DELTA_WIDTH, torch=torch.__version__)
    runs, t_all = [], time.time()
    for param in params:
        for w in widths:
            for x in log2_lrs:
                r = train_run(w, param, 2.0 ** x, train, heldout, offsets, ev_offsets, a.depth, a.seq_len,
                              a.warmup, a.seed, log_every=100)
                runs.append(r)
                res = (f"DIVERGED at step {r['diverged_step']}" if r["diverged"]
                       else f"held-out {r['eval']:.4f}  train(last 100) {r['train_last100']:.4f}")
                print(f"[{len(runs):3d}] {param:8s} width {w:4d} log2 lr {x:+6.2f}  {res}  ({r['seconds']:.1f} s)",
                      flush=True)
                if a.json:
                    write_json(a.json, {"config": config, "notes": notes, "runs": runs})
    rows, shifts = summarize(runs, params, widths)
    print_summary(rows, shifts, log2_lrs)
    print(f"total {time.time() - t_all:.0f} s")
    if a.json:
        write_json(a.json, {"config": config, "notes": notes, "runs": runs, "summary": rows, "shift": shifts,
                            "seconds": time.time() - t_all})


if __name__ == "__main__":
    main()
