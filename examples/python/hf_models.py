"""Hugging Face transformers models, built from their configs (no weights), through scaleinv.apply
and scaleinv.coordcheck under mup (mup-moe for the mixture of experts) and standard, with no
overrides (issue 59). Prints one line per model and the markdown table of docs/python.md.

Each model is built at every width with its *Config(...): hidden size = width, 2 layers, vocabulary
128, 16 positions, intermediate size 2 x width (each expert's and the shared expert's too); the head
dimension is fixed at 16 (the heads grow with width) except in the row marked "d_head scaled" (4
heads, d_head = width / 4). GQA: half as many key/value heads as query heads.

    python examples/python/hf_models.py [--widths 128,256,512] [--seeds 3] [--steps 3] [--lr 1e-3]
        [--models gpt2,llama,llama-tied,mixtral,qwen2-moe,gemma,llama-dhead] [--batch-seed 0] [--threads N]
        [--keep-denormals]
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

import scaleinv

VOCAB, SEQ, BATCH, D_HEAD = 128, 16, 8, 16
# the coordinate check's quantities where a model holds 3-D expert stacks: the spectral norms of
# such a tensor are measured on its [E, out * in] reshape (scaleinv/_coordcheck.py), not per expert
NO_SPECTRAL = ("h", "dh", "h'", "W'", "dW")


def _quiet():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def gpt2(width):
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=width, n_layer=2,
                                      n_head=width // D_HEAD, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=0, eos_token_id=0))


def _llama_config(width, tie, heads=None):
    from transformers import LlamaConfig
    h = heads or width // D_HEAD
    return LlamaConfig(vocab_size=VOCAB, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                       num_attention_heads=h, num_key_value_heads=max(1, h // 2), max_position_embeddings=SEQ,
                       tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)


def llama(width):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM(_llama_config(width, False))


def llama_tied(width):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM(_llama_config(width, True))


def llama_dhead(width):
    """Llama with 4 heads at every width: d_head = width / 4 grows."""
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM(_llama_config(width, False, heads=4))


def mixtral(width):
    from transformers import MixtralConfig, MixtralForCausalLM
    return MixtralForCausalLM(MixtralConfig(vocab_size=VOCAB, hidden_size=width, intermediate_size=2 * width,
                                            num_hidden_layers=2, num_attention_heads=width // D_HEAD,
                                            num_key_value_heads=width // D_HEAD // 2, max_position_embeddings=SEQ,
                                            num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                                            bos_token_id=0, eos_token_id=0))


def qwen2_moe(width):
    """Qwen2-MoE: 4 routed experts (fused 3-D, top-2) beside a shared expert, a dense MLP whose output
    a [1, d] shared_expert_gate scales per token through a sigmoid; q, k, v with biases."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    return Qwen2MoeForCausalLM(Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=width, intermediate_size=2 * width,
                                              moe_intermediate_size=2 * width, shared_expert_intermediate_size=2 * width,
                                              num_hidden_layers=2, num_attention_heads=width // D_HEAD,
                                              num_key_value_heads=width // D_HEAD // 2, max_position_embeddings=SEQ,
                                              num_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                                              bos_token_id=0, eos_token_id=0))


def gemma(width):
    """Gemma: embeddings multiplied by sqrt(hidden_size) inside the model, tied head."""
    from transformers import GemmaConfig, GemmaForCausalLM
    return GemmaForCausalLM(GemmaConfig(vocab_size=VOCAB, hidden_size=width, intermediate_size=2 * width,
                                        num_hidden_layers=2, num_attention_heads=width // D_HEAD,
                                        num_key_value_heads=width // D_HEAD // 2, head_dim=D_HEAD,
                                        max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0, pad_token_id=0))


# name: (builder, class shown, mup-like table, quantities, what the row shows)
MODELS = {
    "gpt2": (gpt2, "GPT2LMHeadModel", "mup", None, "Conv1D [in, out], tied head"),
    "llama": (llama, "LlamaForCausalLM", "mup", None, "GQA, untied"),
    "llama-tied": (llama_tied, "LlamaForCausalLM", "mup", None, "GQA, tied"),
    "mixtral": (mixtral, "MixtralForCausalLM", "mup-moe", NO_SPECTRAL, "4 experts as fused 3-D parameters, top-2 router"),
    "qwen2-moe": (qwen2_moe, "Qwen2MoeForCausalLM", "mup-moe", NO_SPECTRAL,
                  "4 fused 3-D experts, top-2 router, shared expert with a sigmoid gate [1, d]"),
    "gemma": (gemma, "GemmaForCausalLM", "mup", None, "embeddings x sqrt(d) inside, tied"),
    "llama-dhead": (llama_dhead, "LlamaForCausalLM", "mup", None, "d_head scaled (4 heads)"),
}
DEFAULT_MODELS = "gpt2,llama,llama-tied,mixtral,qwen2-moe,gemma,llama-dhead"


def batch(seed=0):
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return x, y


def lm_loss(out, y):
    return F.cross_entropy(out.logits.flatten(0, 1), y.flatten())


def roles_found(plan):
    counts = {}
    for t in plan["tensors"]:
        counts[t["role"]] = counts.get(t["role"], 0) + 1
    return counts


def deciding_row(result):
    """The row that decides the verdict: the worst failure (largest excess past its tolerance, or
    an unstable activation), or, for a pass, the row closest to its tolerance."""
    worst, worst_score = None, None
    for r in result.rows:
        if r["zero"] or r["measured"] is None:
            continue
        if r["predicted"] is not None and r["tolerance"]:
            score = abs(r["measured"] - r["predicted"]) / r["tolerance"]
        elif r["stable"] is False:
            score = 1.0 + abs(r["measured"])
        else:
            continue
        if worst_score is None or score > worst_score:
            worst, worst_score = r, score
    if worst is None:
        return "-"
    pred = "-" if worst["predicted"] is None else f"{worst['predicted']:+.2f}"
    return f"{worst['quantity']} {worst['module']} step {worst['step']}: {worst['measured']:+.2f} vs {pred}"


def run_model(name, widths, seeds, steps, lr, batch_seed):
    make, cls, param, quantities, _ = MODELS[name]
    torch.manual_seed(0)
    plan = scaleinv.plan(make(widths[-1]), make(widths[0]), make(widths[1]), param=param)
    out = {"name": name, "class": cls, "roles": roles_found(plan), "notes": plan["notes"],
           "ties": plan["ties"], "module_scales": plan["module_scales"], "quantities": quantities}
    x, y = batch(batch_seed)
    for p in (param, "standard"):
        t0 = time.time()
        r = scaleinv.coordcheck(make, widths, [(x, y)], param=p, optimizer="adamw", lr=lr, steps=steps, seeds=seeds,
                                loss=lm_loss, progress=False, quantities=quantities)
        out[p if p == "standard" else "mup"] = {"passed": r.passed, "failures": len(r.failures), "rows": len(r.rows),
                                                "decides": deciding_row(r), "seconds": time.time() - t0,
                                                "lines": r.failures}
    return out


def _count(n):
    return f"{n} failure" if n == 1 else f"{n} failures"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="128,256,512")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-seed", type=int, default=0)
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep-denormals", action="store_true",
                    help="leave denormal floats on (GPT-2's backward under standard runs into them: ~10x slower on the CPU)")
    a = ap.parse_args(argv)
    transformers = _quiet()
    if a.threads:
        torch.set_num_threads(a.threads)
    if not a.keep_denormals:
        torch.set_flush_denormal(True)
    widths = sorted(int(w) for w in a.widths.split(","))
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    for n in names:
        if n not in MODELS:
            sys.exit(f"hf_models.py: unknown model '{n}' (fix: some of {', '.join(MODELS)})")
    print(f"transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}; widths {widths}, "
          f"{a.seeds} seeds, {a.steps} AdamW steps, lr {a.lr:g}, batch {BATCH} x {SEQ}, batch seed {a.batch_seed}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results, t_all = [], time.time()
    for n in names:
        res = run_model(n, widths, a.seeds, a.steps, a.lr, a.batch_seed)
        results.append(res)
        roles = ", ".join(f"{k} {v}" for k, v in sorted(res["roles"].items()))
        print(f"{n}: roles {roles}; ties {len(res['ties'])}; module scales {len(res['module_scales'])}", flush=True)
        for note in res["notes"]:
            if "layers.1." not in note and "h.1." not in note:
                print(f"  note: {note}")
        for p in ("mup", "standard"):
            v = res[p]
            print(f"  {p:9s} {'PASS' if v['passed'] else 'FAIL'}: {v['rows']} rows, {v['failures']} failures, "
                  f"{v['seconds']:.1f} s; deciding row {v['decides']}", flush=True)
            if p == "mup":
                for line in v["lines"][:4]:
                    print(f"      {line[:200]}")
    print(f"\ntotal {time.time() - t_all:.0f} s\n")
    print(f"| model (transformers {transformers.__version__}) | what it has | roles found | overrides | "
          "mup (mup-moe) | standard | seconds (mup + standard) |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        _, cls, param, quantities, what = MODELS[res["name"]]
        roles = ", ".join(f"{k} {v}" for k, v in sorted(res["roles"].items()))
        m, s = res["mup"], res["standard"]
        q = " (h, dh, h', W', dW)" if quantities else ""
        mv = (f"{'PASS' if m['passed'] else 'FAIL'}{q}: {_count(m['failures'])}; "
              f"{'closest' if m['passed'] else 'worst'} {m['decides']}")
        sv = f"{'PASS' if s['passed'] else 'FAIL'}: {_count(s['failures'])}; worst {s['decides']}"
        cells = [f"`{cls}` {res['name']}", what, roles, "none", mv, sv, f"{m['seconds']:.0f} + {s['seconds']:.0f}"]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    ok = all(r["mup"]["passed"] and not r["standard"]["passed"] for r in results if r["name"] != "llama-dhead")
    print(f"\nverdict: {'mup passes and standard fails for every fixed-d_head model' if ok else 'NOT as expected'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
