"""torchtitan's own model files, built small (no weights), through scaleinv.apply and
scaleinv.coordcheck under mup (mup-moe for the mixtures of experts) and standard, with no overrides
(issue 59). Prints one block per model and its rows of the table in docs/python.md.

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

What it shares with hf_models.py and vision_models.py (the checks, the verdicts, the table) is in
_model_check.py; model_table.py runs all three into one table.
"""
import contextlib
import os
import sys
import warnings

import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _model_check as mc  # noqa: E402
from _model_check import BATCH, D_HEAD, NO_SPECTRAL, SEQ, VOCAB  # noqa: E402,F401

FAMILY = "torchtitan"
DEFAULT_WIDTHS = "128,256,512"
BATCH_TEXT = f"{BATCH} x {SEQ}"
ALL_EXPECTED = "mup passes and standard fails for every model"
TOLERANCE = False

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
    "qwen3-moe": (qwen3_moe, "Qwen3Model (MoE)", "mup-moe", None,
                  "4 experts as 3-D GroupedExperts (bf16 grouped matmuls), top-2 router, QK-norm"),
    "deepseek-v3": (deepseek_v3, "DeepSeekV3Model", "mup-moe", None,
                    "MLA (kv_lora_rank = width), 2 dense + 2 MoE layers, 4 routed + 2 shared experts, top-2"),
}
DEFAULT_MODELS = "llama3,qwen3-moe,deepseek-v3"


def batch(seed=0):
    """The probe: 8 x 16 random tokens and targets (_model_check.token_batch)."""
    return mc.token_batch(seed)


def lm_loss(out, y):
    return F.cross_entropy(out.flatten(0, 1), y.flatten())


def missing(name):
    """None where torchtitan and its model modules import here, else why not and how to install them."""
    try:
        titan()
    except Exception as exc:  # not installed, or too new for this torch (it needs torch >= 2.11)
        return (f"torchtitan is not importable here ({type(exc).__name__}: {exc})"[:200] +
                f" (fix: pip install --no-deps torchtitan=={WANT} torch_checkpointing spmd_types==0.2.3 tyro "
                "docstring_parser typeguard, as scripts/python_venv.sh does)")
    return None


def libraries(names):
    return f"torchtitan {titan()[1]}"


@contextlib.contextmanager
def settings(args=None):
    """Denormals flushed; the MoE router's float32 autocast warning, which the CPU's autocast gives at
    every forward (bf16 and fp16 only: disabled, and the gate runs in float32 anyway), silenced."""
    with mc.flushed_denormals(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Aa]utocast.*")
        yield


def run_model(name, widths, seeds, steps, lr, batch_seed):
    """The model's plan and its checks under its mup-like table and standard (_model_check.check_model)."""
    make, cls, param, quantities, what = MODELS[name]
    res = mc.check_model(make, widths, batch(batch_seed), param=param, loss=lm_loss, quantities=quantities,
                         seeds=seeds, steps=steps, lr=lr)
    res.update({"name": name, "class": cls, "what": what, "library": "torchtitan", "version": titan()[1]})
    return res


def head_line(res):
    return f"{res['name']}: roles {mc.roles_text(res['roles'])}"


def note_shown(note):
    """The first layer's notes (the later layers' repeat them)."""
    return "layers.1." not in note and "layers.2." not in note and "layers.3." not in note


expected = mc.expected


def main(argv=None):
    return mc.family_main(sys.modules[__name__], "torchtitan_models.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
