"""Hugging Face transformers models built from their configs, no weights (issue 59): roles read from
shapes and layouts (GPT-2's Conv1D [in, out], Llama's GQA, tied and untied heads, Mixtral's router
and fused 3-D expert parameters, Qwen2-MoE's shared expert and its sigmoid gate, Gemma's sqrt(d) embedding scale, attention scales set inside the
modules), the coordinate check passing under mup (mup-moe) and failing under standard with no
overrides, and the structures the plan cannot read refused in one line with nothing modified.

The models come from examples/python/hf_models.py (widths 64, 128, 256 here; d_head 16, 2 layers,
vocabulary 128, 3 seeds, 3 AdamW steps at lr 1e-3, the batch of batch seed 0). Skipped where
transformers is not importable (the oldest leg: Debian's torch 1.13; scripts/python_venv.sh pins it
in the newest)."""
import importlib.util
import os
import unittest
import warnings

import torch
from torch import nn

import scaleinv

try:
    import transformers
except Exception as exc:  # not installed, or too new for this torch
    transformers, WHY = None, f"transformers is not importable here ({type(exc).__name__}: {exc})"[:200]
else:
    WHY = ""

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "hf_models.py")
WIDTHS = [64, 128, 256]


def load_example():
    spec = importlib.util.spec_from_file_location("hf_models", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._quiet()
    return mod


def by_name(plan):
    return {t["name"]: t for t in plan["tensors"]}


_SAVED = {}


def setUpModule():
    # under standard, GPT-2's backward runs into denormal floats: 10x slower on the CPU; verdicts
    # unchanged. One thread: these models are too small to gain from two, and lose much beside a
    # concurrent test.
    if transformers is not None:
        _SAVED["flush"] = torch.set_flush_denormal(True)
        _SAVED["threads"] = torch.get_num_threads()
        torch.set_num_threads(1)


def tearDownModule():
    if _SAVED.get("flush"):
        torch.set_flush_denormal(False)
    if "threads" in _SAVED:
        torch.set_num_threads(_SAVED["threads"])


@unittest.skipIf(transformers is None, WHY)
class Roles(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.hf = load_example()

    def plan(self, make, param="mup"):
        torch.manual_seed(0)
        return scaleinv.plan(make(256), make(64), make(128), param=param)

    def test_gpt2_conv1d_is_read_in_out_and_the_head_is_tied(self):
        p = self.plan(self.hf.gpt2)
        t = by_name(p)
        fc = t["transformer.h.0.mlp.c_fc.weight"]  # Conv1D [256, 1024]: in 256, out 1024
        self.assertEqual((fc["role"], fc["fan_in"], fc["fan_out"]), ("hidden", 256, 1024))
        proj = t["transformer.h.0.mlp.c_proj.weight"]  # [1024, 256]
        self.assertEqual((proj["fan_in"], proj["fan_out"]), (1024, 256))
        self.assertEqual(t["transformer.wpe.weight"]["role"], "embedding")
        self.assertEqual(len(p["ties"]), 1)
        tie = p["ties"][0]
        self.assertEqual((tie["tensor"], tie["readout"], tie["multiplier"]), ("transformer.wte.weight", "lm_head.weight", 0.25))
        # GPT2Attention's own 1/sqrt(d_head), d_head fixed: named, and left as it is
        notes = [n for n in p["notes"] if "GPT2Attention" in n]
        self.assertEqual(len(notes), 2)
        self.assertIn("scaling = 0.25", notes[0])
        self.assertIn("left as it is", notes[0])
        self.assertFalse(any(n.startswith("where d_head grows") for n in p["notes"]))

    def test_llama_gqa_untied_and_tied(self):
        t = by_name(self.plan(self.hf.llama))
        k = t["model.layers.0.self_attn.k_proj.weight"]  # 8 query heads, 4 key/value heads of 16
        self.assertEqual((k["role"], k["fan_in"], k["fan_out"]), ("hidden", 256, 128))
        self.assertEqual(t["lm_head.weight"]["role"], "readout")
        self.assertEqual(t["model.norm.weight"]["role"], "vector")
        p = self.plan(self.hf.llama_tied)
        self.assertNotIn("lm_head.weight", by_name(p))
        self.assertEqual([(x["tensor"], x["readout"]) for x in p["ties"]], [("model.embed_tokens.weight", "lm_head.weight")])

    def test_mixtral_router_and_fused_experts(self):
        t = by_name(self.plan(self.hf.mixtral, "mup-moe"))
        gate = t["model.layers.0.mlp.gate.weight"]  # MixtralTopKRouter's bare [E, d], read by F.linear
        self.assertEqual((gate["role"], gate["fan_in"], gate["fan_out"]), ("router", 256, 4))
        gu = t["model.layers.0.mlp.experts.gate_up_proj"]  # [E, 2 * I, d]
        self.assertEqual((gu["role"], gu["fan_in"], gu["fan_out"]), ("expert", 256, 1024))
        down = t["model.layers.0.mlp.experts.down_proj"]  # [E, d, I]
        self.assertEqual((down["role"], down["fan_in"], down["fan_out"]), ("expert", 512, 256))

    def test_qwen2_moe_router_experts_shared_expert_and_its_gate(self):
        t = by_name(self.plan(self.hf.qwen2_moe, "mup-moe"))
        gate = t["model.layers.0.mlp.gate.weight"]  # Qwen2MoeTopKRouter's bare [E, d]
        self.assertEqual((gate["role"], gate["fan_in"], gate["fan_out"]), ("router", 256, 4))
        gu = t["model.layers.0.mlp.experts.gate_up_proj"]  # [E, 2 * I, d], fused 3-D in transformers 5.x
        self.assertEqual((gu["role"], gu["fan_in"], gu["fan_out"]), ("expert", 256, 1024))
        self.assertEqual(t["model.layers.0.mlp.experts.down_proj"]["role"], "expert")
        # the shared expert is a dense MLP: its matrices are hidden ones
        for n in ("gate_proj", "up_proj", "down_proj"):
            self.assertEqual(t[f"model.layers.0.mlp.shared_expert.{n}.weight"]["role"], "hidden")
        # shared_expert_gate, nn.Linear(d, 1): one logit per token read from the normalised stream and
        # passed through a sigmoid, a one-output router (the readout's row under a dense table)
        sg = t["model.layers.0.mlp.shared_expert_gate.weight"]
        self.assertEqual((sg["role"], sg["fan_in"], sg["fan_out"]), ("router", 256, 1))
        self.assertEqual(t["model.layers.0.self_attn.q_proj.bias"]["role"], "vector")

    def test_gemma_embedding_scale_is_kept_at_the_base_value(self):
        torch.manual_seed(0)
        model = self.hf.gemma(256)
        opt = scaleinv.apply(model, self.hf.gemma(64), self.hf.gemma(128), param="mup")
        note = [n for n in opt.scaleinv_plan["notes"] if "embed_scale" in n]
        self.assertEqual(len(note), 1)
        self.assertIn("embed_scale = 16 (8 at the base width)", note[0])
        self.assertEqual(float(model.model.embed_tokens.embed_scale), 8.0)

    def test_attention_scale_follows_the_table_where_d_head_grows(self):
        for param, want in (("mup", 0.25 / 4), ("standard", 0.25 / 2)):
            torch.manual_seed(0)
            model = self.hf.llama_dhead(256)  # d_head 64, base 16
            opt = scaleinv.apply(model, self.hf.llama_dhead(64), self.hf.llama_dhead(128), param=param)
            self.assertAlmostEqual(model.model.layers[1].self_attn.scaling, want, places=12)
            notes = opt.scaleinv_plan["notes"]
            self.assertTrue(any("LlamaAttention" in n and "d_head 64" in n for n in notes), notes)
            # mup: the plan says in one line per attention why its q/k rows cannot pass
            cannot = [n for n in notes if "d^-3/2" in n]
            self.assertEqual(len(cannot), 2 if param == "mup" else 0)


@unittest.skipIf(transformers is None, WHY)
class CoordCheck(unittest.TestCase):
    """Each model passes under mup (mup-moe) and fails under standard, no overrides."""

    @classmethod
    def setUpClass(cls):
        cls.hf = load_example()
        cls.batch = cls.hf.batch(0)

    def check(self, make, param, quantities=None):
        return scaleinv.coordcheck(make, WIDTHS, [self.batch], param=param, optimizer="adamw", lr=1e-3, steps=3,
                                   seeds=3, loss=self.hf.lm_loss, progress=False, quantities=quantities)

    def both(self, make, param="mup", quantities=None, standard=None):
        """mup (or param) passes on quantities; standard fails on `standard` (default: the same)."""
        r = self.check(make, param, quantities)
        self.assertTrue(r.passed, "\n".join(r.failures))
        r = self.check(make, "standard", quantities if standard is None else standard)
        self.assertFalse(r.passed)
        # standard's failures are the blocks' outputs growing with width
        self.assertTrue(any("unstable, grows with width" in f for f in r.failures), r.failures)

    def test_gpt2(self):
        self.both(self.hf.gpt2)

    def test_llama_untied(self):
        self.both(self.hf.llama)

    def test_llama_tied(self):
        self.both(self.hf.llama_tied)

    def test_mixtral(self):
        # every quantity under mup-moe: the fused 3-D experts' spectral norms are measured per expert.
        # Standard fails on its activations; its 1764 Lanczos runs (2 ms each) are left out for time.
        self.assertIsNone(self.hf.MODELS["mixtral"][3])
        self.both(self.hf.mixtral, "mup-moe", standard=self.hf.NO_SPECTRAL)

    def test_qwen2_moe(self):
        # every quantity under mup-moe, the [1, d] shared_expert_gate's ||W|| included (Lanczos takes
        # rows + 1 = 2 steps on it: exact). Standard fails on its activations; its norms left out for time.
        self.assertIsNone(self.hf.MODELS["qwen2-moe"][3])
        self.both(self.hf.qwen2_moe, "mup-moe", standard=self.hf.NO_SPECTRAL)


# ---- structures the plan cannot read: one UserError line, nothing modified ----
class _SharedAcrossRoles(nn.Module):
    """A router's weight inside a block shared with the model's readout."""

    def __init__(self, w):
        super().__init__()
        self.emb = nn.Embedding(10, w)
        self.blocks = nn.ModuleList([nn.ModuleDict({"fc": nn.Linear(w, w), "gate": nn.Linear(w, 4)}) for _ in range(2)])
        self.head = nn.Linear(w, 4)
        self.head.weight = self.blocks[0]["gate"].weight


class _ExpertsNotFirst(nn.Module):
    """An expert stack stored [out, E, in]."""

    def __init__(self, w):
        super().__init__()
        self.emb = nn.Embedding(10, w)
        self.experts = nn.Parameter(torch.randn(2 * w, 4, w) / w ** 0.5)
        self.head = nn.Linear(w, 10)


class _Lazy(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.emb = nn.Embedding(10, w)
        with warnings.catch_warnings():  # torch 1.13: "Lazy modules are a new feature ..."
            warnings.simplefilter("ignore")
            self.fc = nn.LazyLinear(w)
        self.head = nn.Linear(w, 10)


class Refused(unittest.TestCase):
    def refused(self, cls, *words):
        torch.manual_seed(0)
        model = cls(256)
        before = {k: v.clone() for k, v in model.state_dict().items()
                  if not isinstance(v, getattr(nn.parameter, "UninitializedTensorMixin", ()))}
        with self.assertRaises(scaleinv.UserError) as cm:
            scaleinv.apply(model, cls(64), cls(128), param="mup")
        msg = str(cm.exception)
        self.assertNotIn("\n", msg)
        self.assertIn("fix:", msg)
        for w in words:
            self.assertIn(w, msg)
        for k, v in model.state_dict().items():
            if k in before:
                self.assertTrue(torch.equal(before[k], v), k)
        self.assertIsNone(getattr(model, "scaleinv_plan", None))
        return msg

    def test_shared_between_two_roles(self):
        self.refused(_SharedAcrossRoles, "head.weight", "blocks.0.gate.weight", "[4, 256]", "readout", "router")

    def test_expert_dimension_not_first(self):
        self.refused(_ExpertsNotFirst, "experts", "[512, 4, 256]", "dimension 1", "[E, out, in]")

    def test_lazy_weight(self):
        self.refused(_Lazy, "fc.weight", "LazyLinear", "shape not yet known", "forward pass")


if __name__ == "__main__":
    unittest.main()
