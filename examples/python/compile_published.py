"""nanoGPT's model.py as published, through scaleinv.apply and torch.compile: the tied readout's
multiplier hook and the per-tensor groups under inductor, against the same model trained eagerly.
Prints dynamo's graph and break counts and the worst relative loss difference over the steps.
nanoGPT is not copied here: pass the model.py of your clone (docs/python.md#torch-2x-compile-ddp-fsdp2).

    python examples/python/compile_published.py --nanogpt-src ~/nanoGPT/model.py [--steps 50] [--width 128]
"""
import argparse
import importlib.util
import os
import sys
import time

import torch

import scaleinv


def load(path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("published_nanogpt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanogpt-src", required=True, help="path of nanoGPT's model.py")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--width", type=int, default=128)
    a = ap.parse_args()
    mod = load(a.nanogpt_src)

    def make(width, seed=0):
        torch.manual_seed(seed)
        cfg = mod.GPTConfig(block_size=32, vocab_size=256, n_layer=2, n_head=width // 32, n_embd=width,
                            dropout=0.0, bias=False)
        m = mod.GPT(cfg)
        return m

    def applied():
        m = make(a.width)
        opt = scaleinv.apply(m, base=make(64), delta=make(128 if a.width != 128 else 256), param="mup",
                             optimizer="adamw", lr=3e-3, weight_decay=0.1)
        return m, opt

    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (8, 33), generator=g)
    idx, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    model, _ = applied()
    print(f"torch {torch.__version__}; nanoGPT's GPT at width {a.width}: {len(model.scaleinv_hooks)} readout hook(s), "
          f"ties {[(t['tensor'], t['use']) for t in model.scaleinv_plan['ties']]}")
    ex = torch._dynamo.explain(model)(idx, tgt)
    print(f"dynamo: {ex.graph_count} graph(s), {ex.graph_break_count} break(s)"
          + "".join(f"\n  break: {b.reason}" for b in ex.break_reasons))
    torch._dynamo.reset()
    losses = {}
    for name in ("eager", "compiled"):
        m, opt = applied()
        run = torch.compile(m) if name == "compiled" else m
        t0, ls = time.time(), []
        for _ in range(a.steps):
            opt.zero_grad(set_to_none=True)
            _, loss = run(idx, tgt)
            loss.backward()
            opt.step()
            ls.append(loss.item())
        losses[name] = ls
        print(f"{name:9s} loss {ls[0]:.4f} -> {ls[-1]:.4f} in {a.steps} steps ({time.time() - t0:.1f} s)")
    worst = max(abs(p - q) / abs(p) for p, q in zip(losses["eager"], losses["compiled"]))
    print(f"worst relative loss difference, compiled against eager: {worst:.2e} "
          f"({'PASS' if worst < 1e-4 else 'FAIL'} at 1e-4)")


if __name__ == "__main__":
    main()
