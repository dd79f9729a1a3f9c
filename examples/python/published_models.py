"""nanoGPT's and llama2.c's model.py, as published, under scaleinv: no overrides, no edits.

The two files are not part of this repository: point the script at your own copies (a clone of
https://github.com/karpathy/nanoGPT and of https://github.com/karpathy/llama2.c) and it imports
them from there, exactly as they are:

    python examples/python/published_models.py --nanogpt-src ~/nanoGPT/model.py --llama2c-src ~/llama2.c/model.py

Both tie the readout to the token embedding (nanoGPT: transformer.wte.weight = lm_head.weight;
llama2.c: tok_embeddings.weight = output.weight), so the check also judges apply's tied-readout
hook. Each model is built as its configs scale it: head size fixed (n_head = width / head_dim),
2 layers, a small vocabulary and block size, dropout 0; llama2.c with its SwiGLU hidden size
rounded up to multiple_of (192, 352, 704, 1376 at widths 64..512: the hidden dimension does not
grow by exactly 2) and grouped-query attention (n_kv_heads = n_heads / 2). Under torch < 2.0 both
files take their own slow-attention path (no F.scaled_dot_product_attention; each prints a
warning, silenced here). Every model is trained the way both repos train it, model(idx, targets)
with every position's logits, through a two-line wrapper that only passes the targets on.

The check: widths 64..512, 3 seeds, 3 AdamW steps on one fixed batch of 4 x 16 tokens, under mup
and under standard; it prints each verdict and the failing rows. lr 1e-3 (at the base width 64) is
the scale both repos train at (nanoGPT 6e-4..1e-3, llama2.c 5e-4). At lr 1e-2 (--lr 1e-2) some
mup rows at steps 2-3 miss at 3 seeds (llama2.c 4 of 10 batches, nanoGPT 2 of 10): a finite-width
term that grows with the hidden matrices' LR (gone at 0.1x their LR), not a role, width ratio or
tie of these files. The check gives such a miss a second look past the 1/d term and, at 3 seeds,
says the term is unresolved; with --seeds 10 nanoGPT passes, llama2.c still misses on
layers.1.attention.wo at step 2 with the term unresolved (docs/python.md, docs/coordcheck.md,
examples/python/finite_width.py).
"""
import argparse
import contextlib
import importlib.util
import io
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import scaleinv

VOCAB, SEQ, LAYERS = 64, 16, 2


def load(path, name):
    """The user's model.py, imported from where it is (its own directory first on sys.path, as
    `python train.py` beside it would have it)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        sys.exit(f"{name}: {path}: no such file (fix: the path of model.py in your clone)")
    spec = importlib.util.spec_from_file_location(f"published_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


def quiet(make):
    """Both files print at construction (parameter count, the slow-attention warning)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        return make()


class WithTargets(nn.Module):
    """model(idx, targets), as train.py calls it: every position's logits (without targets both
    models compute only the last position's)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, xy):
        return self.model(*xy)


def nanogpt_factory(mod, head_dim):
    def make(width):
        cfg = mod.GPTConfig(block_size=SEQ, vocab_size=VOCAB, n_layer=LAYERS, n_head=width // head_dim,
                            n_embd=width, dropout=0.0)
        return WithTargets(quiet(lambda: mod.GPT(cfg)))

    def loss(out, y):
        return out[1]  # nanoGPT returns (logits, loss)
    return make, loss


def llama2c_factory(mod, head_dim, multiple_of):
    def make(width):
        n_heads = width // head_dim
        args = mod.ModelArgs(dim=width, n_layers=LAYERS, n_heads=n_heads, n_kv_heads=max(1, n_heads // 2),
                             vocab_size=VOCAB, multiple_of=multiple_of, max_seq_len=SEQ, dropout=0.0)
        return WithTargets(quiet(lambda: mod.Transformer(args)))

    def loss(out, y):  # llama2.c returns the logits and keeps the same loss in model.last_loss
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return make, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nanogpt-src", help="path of nanoGPT's model.py")
    ap.add_argument("--llama2c-src", help="path of llama2.c's model.py")
    ap.add_argument("--widths", default="64,128,256,512")
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--multiple-of", type=int, default=32, help="llama2.c's multiple_of (its train.py: 32)")
    ap.add_argument("--params", default="mup,standard")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show", type=int, default=12, help="failing rows printed per check")
    ap.add_argument("--table", action="store_true", help="print the whole judged table")
    a = ap.parse_args()
    if not a.nanogpt_src and not a.llama2c_src:
        ap.error("give --nanogpt-src and/or --llama2c-src (the model.py of your clone)")
    torch.set_num_threads(a.threads)
    widths = [int(w) for w in a.widths.split(",")]
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, VOCAB, (4, SEQ + 1), generator=g)
    x, y = idx[:, :-1], idx[:, 1:].contiguous()
    batch = ((x, y), y)

    models = []
    if a.nanogpt_src:
        models.append(("nanoGPT", nanogpt_factory(load(a.nanogpt_src, "nanogpt"), a.head_dim)))
    if a.llama2c_src:
        models.append(("llama2.c", llama2c_factory(load(a.llama2c_src, "llama2c"), a.head_dim, a.multiple_of)))
    ok = True
    for name, (make, loss) in models:
        p = scaleinv.plan(make(widths[-1]), base=make(widths[0]), delta=make(widths[1]), param="mup")
        count = {}
        for t in p["tensors"]:
            count[t["role"]] = count.get(t["role"], 0) + 1
        print(f"{name}: widths {widths}, head_dim {a.head_dim}; roles "
              + ", ".join(f"{r} {n}" for r, n in sorted(count.items()))
              + "; ties " + ", ".join(f"{t['use']} -> {t['tensor']} x{t['multiplier']:.3g}" for t in p["ties"]))
        for t in p["tensors"]:
            if abs(t["m"] - widths[-1] / widths[0]) > 1e-9:
                print(f"  {t['name']}: m = {t['m']:.4g} (fan-in {t['fan_in']}, fan-out {t['fan_out']})")
        for param in a.params.split(","):
            t0 = time.time()
            r = scaleinv.coordcheck(make, widths=widths, batches=[batch], param=param, optimizer="adamw", lr=a.lr,
                                    steps=a.steps, seeds=a.seeds, loss=loss, progress=False,
                                    quantities=["h", "dh", "h'", "W'", "dW"])
            judged = sum(1 for row in r.rows if row["predicted"] is not None and not row["zero"])
            print(f"  {param:<9} {'PASS' if r.passed else 'FAIL'}: {len(r.rows)} rows ({judged} with a prediction), "
                  f"{len(r.failures)} failures, {time.time() - t0:.0f} s")
            for f in r.failures[:a.show]:
                print("     ", f)
            if a.table:
                print(r)
            ok = ok and (r.passed == (param == "mup"))
    print("verdict:", "mup passes and standard fails for every model" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
