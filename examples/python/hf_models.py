"""Hugging Face transformers models, built from their configs (no weights), through scaleinv.apply
and scaleinv.coordcheck under mup (mup-moe for the mixture of experts) and standard, with no
overrides (issue 59). Prints one block per model and its rows of the table in docs/python.md.

Each model is built at every width with its *Config(...): hidden size = width, 2 layers, vocabulary
128, 16 positions, intermediate size 2 x width (each expert's and the shared expert's too); the head
dimension is fixed at 16 (the heads grow with width) except in the row marked "d_head scaled" (4
heads, d_head = width / 4). GQA: half as many key/value heads as query heads.

    python examples/python/hf_models.py [--widths 128,256,512] [--seeds 3] [--steps 3] [--lr 1e-3]
        [--models gpt2,llama,llama-tied,mixtral,qwen2-moe,gemma,llama-dhead] [--batch-seed 0] [--threads N]
        [--keep-denormals]

What it shares with vision_models.py and torchtitan_models.py (the checks, the verdicts, the
table) is in _model_check.py; model_table.py runs all three into one table.
"""
import contextlib
import os
import sys

import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _model_check as mc  # noqa: E402
from _model_check import BATCH, D_HEAD, NO_SPECTRAL, SEQ, VOCAB  # noqa: E402,F401

FAMILY = "transformers"
DEFAULT_WIDTHS = "128,256,512"
BATCH_TEXT = f"{BATCH} x {SEQ}"
ALL_EXPECTED = "mup passes and standard fails for every fixed-d_head model"
TOLERANCE = False


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


# name: (builder, class shown, mup-like table, quantities (None: all seven), what the row shows)
MODELS = {
    "gpt2": (gpt2, "GPT2LMHeadModel", "mup", None, "Conv1D [in, out], tied head"),
    "llama": (llama, "LlamaForCausalLM", "mup", None, "GQA, untied"),
    "llama-tied": (llama_tied, "LlamaForCausalLM", "mup", None, "GQA, tied"),
    "mixtral": (mixtral, "MixtralForCausalLM", "mup-moe", None, "4 experts as fused 3-D parameters, top-2 router"),
    "qwen2-moe": (qwen2_moe, "Qwen2MoeForCausalLM", "mup-moe", None,
                  "4 fused 3-D experts, top-2 router, shared expert with a sigmoid gate [1, d]"),
    "gemma": (gemma, "GemmaForCausalLM", "mup", None, "embeddings x sqrt(d) inside, tied"),
    "llama-dhead": (llama_dhead, "LlamaForCausalLM", "mup", None, "d_head scaled (4 heads)"),
}
DEFAULT_MODELS = "gpt2,llama,llama-tied,mixtral,qwen2-moe,gemma,llama-dhead"


def batch(seed=0):
    """The probe: 8 x 16 random tokens and targets (_model_check.token_batch)."""
    return mc.token_batch(seed)


def lm_loss(out, y):
    return F.cross_entropy(out.logits.flatten(0, 1), y.flatten())


def missing(name):
    """None where transformers imports here, else why not."""
    try:
        import transformers  # noqa: F401
    except Exception as exc:  # not installed, or too new for this torch
        return f"transformers is not importable here ({type(exc).__name__}: {exc})"[:200]
    return None


def libraries(names):
    return f"transformers {_quiet().__version__}"


@contextlib.contextmanager
def settings(args=None):
    """transformers' logging quiet; denormals flushed unless --keep-denormals."""
    _quiet()
    if args is not None and getattr(args, "keep_denormals", False):
        yield
        return
    with mc.flushed_denormals():
        yield


def run_model(name, widths, seeds, steps, lr, batch_seed):
    """The model's plan and its checks under its mup-like table and standard (_model_check.check_model)."""
    make, cls, param, quantities, what = MODELS[name]
    res = mc.check_model(make, widths, batch(batch_seed), param=param, loss=lm_loss, quantities=quantities,
                         seeds=seeds, steps=steps, lr=lr)
    res.update({"name": name, "class": cls, "what": what, "library": "transformers", "version": _quiet().__version__})
    return res


def head_line(res):
    return (f"{res['name']}: roles {mc.roles_text(res['roles'])}; ties {len(res['ties'])}; "
            f"module scales {len(res['module_scales'])}")


def note_shown(note):
    """The first layer's notes (the second's repeat them)."""
    return "layers.1." not in note and "h.1." not in note


expected = mc.expected


def main(argv=None):
    def add_args(ap):
        ap.add_argument("--keep-denormals", action="store_true",
                        help="leave denormal floats on (GPT-2's backward under standard runs into them: ~10x slower "
                             "on the CPU)")
    return mc.family_main(sys.modules[__name__], "hf_models.py", __doc__, argv, add_args)


if __name__ == "__main__":
    sys.exit(main())
