"""torchtitan's own model files, built small (no weights), through scaleinv.apply and
scaleinv.coordcheck under mup (mup-moe for the mixtures of experts) and standard, with no overrides
(issue 59). Prints one line per model and the markdown table of docs/python.md.

The models are torchtitan 0.3.0's classes and per-layer config builders as shipped (its own inits:
truncated normals of std 0.02, depth-scaled output projections, an lm_head of std d^-1/2), built at
every width: dim = width, vocabulary 128, 16 positions, the head dimension fixed at 16 (the heads
grow with width), half as many key/value heads as query heads, FFN and expert hidden size 2 x width.
  llama3       Llama3Model, 2 layers, fused wqkv
  qwen3-moe    Qwen3Model with MoE layers: 4 experts as 3-D GroupedExperts (bf16 grouped matmuls),
               top-2 softmax router, QK-norm, 2 layers
  deepseek-v3  DeepSeekV3Model: multi-head latent attention (kv_lora_rank = width, q_lora_rank 0,
               nope/rope/v head dims 16/8/16), 2 dense layers then 2 MoE layers (4 routed experts
               of hidden width, 2 shared experts, top-2 softmax router)
One change from the shipped configs, and why: every attention's inner kernel is torchtitan's own
ScaledDotProductAttention (causal) in place of FlexAttention. On the CPU FlexAttention has no
backward in torch 2.14.1 ("FlexAttention does not support backward on CPU"), varlen needs CUDA and
torchtitan no longer offers "sdpa" for language models; with one document per row the causal mask is
the block-causal one FlexAttention would use.

    python examples/python/torchtitan_models.py [--widths 128,256,512] [--seeds 3] [--steps 3]
        [--lr 1e-3] [--models llama3,qwen3-moe,deepseek-v3] [--batch-seed 0] [--threads N]
"""
import argparse
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import scaleinv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models import BATCH, D_HEAD, NO_SPECTRAL, SEQ, VOCAB, _count, batch, deciding_row, roles_found  # noqa: E402

WANT = "0.3.0"  # the version the builders below were written against (private per-layer builders)


def titan():
    """The torchtitan module, its version, and the builders' modules; raises ImportError with why."""
    import importlib.metadata
    import torchtitan
    version = importlib.metadata.version("torchtitan")
    import torchtitan.models.deepseek_v3 as dsv3
    import torchtitan.models.llama3 as llama
    import torchtitan.models.qwen3 as qwen3
    return torchtitan, version, llama, qwen3, dsv3


def _sdpa(layers):
    """Every layer's inner attention: torchtitan's ScaledDotProductAttention (see the docstring)."""
    from torchtitan.models.common import ScaledDotProductAttention
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return layers


def _build(config):
    with warnings.catch_warnings():  # "CPU Autocast only supports ..." from the router's float32 autocast
        warnings.simplefilter("ignore")
        model = config.build()
        model.init_states()
    return model


def llama3(width):
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    L = titan()[2]
    layers = L._build_llama3_layers(n_layers=2, dim=width, n_heads=width // D_HEAD, n_kv_heads=width // D_HEAD // 2,
                                    hidden_dim=2 * width, attn_backend="flex",
                                    rope=ComplexRoPE.Config(dim=D_HEAD, max_seq_len=SEQ, theta=500000, scaling="llama"))
    return _build(L.Llama3Model.Config(
        dim=width, vocab_size=VOCAB, layers=_sdpa(layers),
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=width, param_init=L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=width, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=width, out_features=VOCAB, param_init=L._output_linear_init(width))))


def qwen3_moe(width):
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    Q = titan()[3]
    layers = Q._build_qwen3_moe_layers(n_layers=2, dim=width, n_heads=width // D_HEAD, n_kv_heads=width // D_HEAD // 2,
                                       head_dim=D_HEAD, moe_hidden_dim=2 * width, num_experts=4, top_k=2,
                                       attn_backend="flex", moe_comm_backend="standard",
                                       rope=CosSinRoPE.Config(dim=D_HEAD, max_seq_len=SEQ, theta=1000000.0))
    return _build(Q.Qwen3Model.Config(
        dim=width, vocab_size=VOCAB, layers=_sdpa(layers), norm=Q._qwen3_norm(width),
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=width, param_init=Q._EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=width, out_features=VOCAB, param_init=Q._LINEAR_INIT)))


def deepseek_v3(width):
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    D = titan()[4]
    layers = D._build_dsv3_layers(n_layers=4, n_dense_layers=2, dim=width, n_heads=width // D_HEAD, q_lora_rank=0,
                                  kv_lora_rank=width, qk_nope_head_dim=D_HEAD, qk_rope_head_dim=D_HEAD // 2,
                                  v_head_dim=D_HEAD, mscale=0.70, dense_hidden_dim=2 * width, moe_hidden_dim=width,
                                  num_experts=4, num_shared_experts=2, router_top_k=2, router_score_func="softmax",
                                  attn_backend="flex", moe_comm_backend="standard", non_blocking_capacity_factor=None,
                                  rope=ComplexRoPE.Config(dim=D_HEAD // 2, max_seq_len=SEQ, theta=10000.0))
    return _build(D.DeepSeekV3Model.Config(
        dim=width, vocab_size=VOCAB, layers=_sdpa(layers),
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=width, param_init=D._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=width, param_init=D._NORM_INIT),
        lm_head=Linear.Config(in_features=width, out_features=VOCAB, param_init=D._output_linear_init(width))))


# name: (builder, class shown, mup-like table, quantities, what the row shows)
MODELS = {
    "llama3": (llama3, "Llama3Model", "mup", None, "fused wqkv, GQA, untied"),
    "qwen3-moe": (qwen3_moe, "Qwen3Model (MoE)", "mup-moe", NO_SPECTRAL,
                  "4 experts as 3-D GroupedExperts (bf16 grouped matmuls), top-2 router, QK-norm"),
    "deepseek-v3": (deepseek_v3, "DeepSeekV3Model", "mup-moe", NO_SPECTRAL,
                    "MLA (kv_lora_rank = width), 2 dense + 2 MoE layers, 4 routed + 2 shared experts, top-2"),
}
DEFAULT_MODELS = "llama3,qwen3-moe,deepseek-v3"


def lm_loss(out, y):
    return F.cross_entropy(out.flatten(0, 1), y.flatten())


def run_model(name, widths, seeds, steps, lr, batch_seed):
    make, cls, param, quantities, _ = MODELS[name]
    torch.manual_seed(0)
    plan = scaleinv.plan(make(widths[-1]), make(widths[0]), make(widths[1]), param=param)
    out = {"name": name, "class": cls, "roles": roles_found(plan), "notes": plan["notes"], "plan": plan}
    x, y = batch(batch_seed)
    for p in (param, "standard"):
        t0 = time.time()
        r = scaleinv.coordcheck(make, widths, [(x, y)], param=p, optimizer="adamw", lr=lr, steps=steps, seeds=seeds,
                                loss=lm_loss, progress=False, quantities=quantities)
        out[p if p == "standard" else "mup"] = {"passed": r.passed, "failures": len(r.failures), "rows": len(r.rows),
                                                "decides": deciding_row(r), "seconds": time.time() - t0,
                                                "lines": r.failures}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="128,256,512")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-seed", type=int, default=0)
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        version = titan()[1]
    except ImportError as exc:
        sys.exit(f"torchtitan_models.py: torchtitan is not importable here ({type(exc).__name__}: {exc}) "
                 f"(fix: pip install --no-deps torchtitan=={WANT} torch_checkpointing spmd_types==0.2.3 tyro "
                 "docstring_parser typeguard, as scripts/python_venv.sh does)")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    # the MoE router asks for a float32 autocast, which the CPU's autocast refuses (bf16 and fp16
    # only) with a warning at every forward: it is disabled, and the gate runs in float32 anyway
    warnings.filterwarnings("ignore", message=".*[Aa]utocast.*")
    widths = sorted(int(w) for w in a.widths.split(","))
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    for n in names:
        if n not in MODELS:
            sys.exit(f"torchtitan_models.py: unknown model '{n}' (fix: some of {', '.join(MODELS)})")
    print(f"torchtitan {version}, torch {torch.__version__.split('+')[0]}; widths {widths}, {a.seeds} seeds, "
          f"{a.steps} AdamW steps, lr {a.lr:g}, batch {BATCH} x {SEQ}, batch seed {a.batch_seed}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results, t_all = [], time.time()
    for n in names:
        res = run_model(n, widths, a.seeds, a.steps, a.lr, a.batch_seed)
        results.append(res)
        roles = ", ".join(f"{k} {v}" for k, v in sorted(res["roles"].items()))
        print(f"{n}: roles {roles}", flush=True)
        for note in res["notes"]:
            if "layers.1." not in note and "layers.2." not in note and "layers.3." not in note:
                print(f"  note: {note}")
        for p in ("mup", "standard"):
            v = res[p]
            print(f"  {p:9s} {'PASS' if v['passed'] else 'FAIL'}: {v['rows']} rows, {v['failures']} failures, "
                  f"{v['seconds']:.1f} s; deciding row {v['decides']}", flush=True)
            if p == "mup":
                for line in v["lines"][:4]:
                    print(f"      {line[:200]}")
    print(f"\ntotal {time.time() - t_all:.0f} s\n")
    print(f"| model (torchtitan {version}) | what it has | roles found | overrides | mup (mup-moe) | standard | "
          "seconds (mup + standard) |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        _, cls, _, quantities, what = MODELS[res["name"]]
        roles = ", ".join(f"{k} {v}" for k, v in sorted(res["roles"].items()))
        m, s = res["mup"], res["standard"]
        q = " (h, dh, h', W', dW)" if quantities else ""
        mv = (f"{'PASS' if m['passed'] else 'FAIL'}{q}: {_count(m['failures'])}; "
              f"{'closest' if m['passed'] else 'worst'} {m['decides']}")
        sv = f"{'PASS' if s['passed'] else 'FAIL'}: {_count(s['failures'])}; worst {s['decides']}"
        cells = [f"`{cls}` {res['name']}", what, roles, "none", mv, sv, f"{m['seconds']:.0f} + {s['seconds']:.0f}"]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    ok = all(r["mup"]["passed"] and not r["standard"]["passed"] for r in results)
    print(f"\nverdict: {'mup passes and standard fails for every model' if ok else 'NOT as expected'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
