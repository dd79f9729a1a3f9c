"""torchtitan's own model files built small, no weights (issue 59): Llama 3 (fused wqkv), Qwen3 with
MoE layers (3-D GroupedExperts, top-2 router) and DeepSeek V3 (latent attention, shared experts)
read role by role, and the coordinate check passing under mup (mup-moe) and failing under standard
with no overrides, for Llama 3 and Qwen3-MoE (about 15 s; DeepSeek V3's four layers take as long
again, so its check is in the table of docs/python.md only).

The models come from examples/python/torchtitan_models.py (widths 64, 128, 256 here; d_head 16,
vocabulary 128, 3 seeds, 3 AdamW steps at lr 1e-3, the batch of batch seed 0). Skipped where
torchtitan is not importable (the oldest leg; scripts/python_venv.sh pins 0.3.0 in the newest)."""
import importlib.util
import os
import sys
import unittest
import warnings

import torch

import scaleinv

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")
WIDTHS = [64, 128, 256]


def load_example():
    sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location("torchtitan_models", os.path.join(EXAMPLES, "torchtitan_models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


try:
    TT = load_example()
    VERSION = TT.titan()[1]
except Exception as exc:  # not installed, or too new for this torch (it needs torch >= 2.11)
    TT, WHY = None, f"torchtitan is not importable here ({type(exc).__name__}: {exc})"[:200]
else:
    WHY = ""


def by_name(plan):
    return {t["name"]: t for t in plan["tensors"]}


_SAVED = {}


def setUpModule():
    if TT is not None:
        _SAVED["flush"] = torch.set_flush_denormal(True)
        _SAVED["threads"] = torch.get_num_threads()
        torch.set_num_threads(1)
        _SAVED["warnings"] = warnings.catch_warnings()
        _SAVED["warnings"].__enter__()
        # the MoE router's float32 autocast, refused by the CPU's autocast at every forward
        warnings.filterwarnings("ignore", message=".*[Aa]utocast.*")


def tearDownModule():
    if _SAVED.get("flush"):
        torch.set_flush_denormal(False)
    if "threads" in _SAVED:
        torch.set_num_threads(_SAVED["threads"])
    if "warnings" in _SAVED:
        _SAVED["warnings"].__exit__(None, None, None)


@unittest.skipIf(TT is None, WHY)
class Roles(unittest.TestCase):
    def plan(self, make, param="mup"):
        torch.manual_seed(0)
        return scaleinv.plan(make(256), make(64), make(128), param=param)

    def test_llama3_fused_qkv_is_one_hidden_matrix(self):
        t = by_name(self.plan(TT.llama3))
        qkv = t["layers.0.attention.qkv_linear.wqkv.weight"]  # 16 query + 2 x 8 key/value heads of 16
        self.assertEqual((qkv["role"], qkv["fan_in"], qkv["fan_out"]), ("hidden", 256, 512))
        self.assertEqual(t["tok_embeddings.weight"]["role"], "embedding")
        self.assertEqual(t["lm_head.weight"]["role"], "readout")
        self.assertEqual(t["layers.1.feed_forward.w2.weight"]["role"], "hidden")

    def test_qwen3_moe_router_and_grouped_experts(self):
        t = by_name(self.plan(TT.qwen3_moe, "mup-moe"))
        gate = t["layers.0.moe.router.gate.weight"]  # a Linear [E, d] inside TokenChoiceTopKRouter
        self.assertEqual((gate["role"], gate["fan_in"], gate["fan_out"]), ("router", 256, 4))
        for n, fi, fo in (("w1_EFD", 256, 512), ("w2_EDF", 512, 256), ("w3_EFD", 256, 512)):
            e = t[f"layers.0.moe.routed_experts.inner_experts.{n}"]  # [E, out, in]
            self.assertEqual((e["role"], e["fan_in"], e["fan_out"]), ("expert", fi, fo))
        self.assertEqual(t["layers.0.attention.q_norm.weight"]["role"], "vector")  # RMSNorm over d_head 16

    def test_deepseek_v3_latent_attention_and_shared_experts(self):
        p = self.plan(TT.deepseek_v3, "mup-moe")
        t = by_name(p)
        self.assertEqual(t["layers.2.moe.router.gate.weight"]["role"], "router")
        self.assertEqual(t["layers.2.moe.routed_experts.inner_experts.w2_EDF"]["role"], "expert")
        for n in ("w1", "w2", "w3"):  # the shared experts: one dense FFN
            self.assertEqual(t[f"layers.2.moe.shared_experts.{n}.weight"]["role"], "hidden")
        # kv_lora_rank = width: the latent grows, so both halves of the low-rank key/value are hidden
        self.assertEqual(t["layers.0.attention.wkv_a.weight"]["role"], "hidden")
        self.assertEqual(t["layers.0.attention.wkv_b.weight"]["role"], "hidden")
        self.assertEqual(t["layers.0.feed_forward.w1.weight"]["role"], "hidden")  # the dense layers


@unittest.skipIf(TT is None, WHY)
class CoordCheck(unittest.TestCase):
    """Passes under mup (mup-moe) and fails under standard, no overrides."""

    def both(self, make, param, standard=None):
        """param passes on every quantity; standard fails on `standard` (default: every quantity)."""
        batch = TT.batch(0)
        kw = dict(optimizer="adamw", lr=1e-3, steps=3, seeds=3, loss=TT.lm_loss, progress=False)
        r = scaleinv.coordcheck(make, WIDTHS, [batch], param=param, **kw)
        self.assertTrue(r.passed, "\n".join(r.failures))
        r = scaleinv.coordcheck(make, WIDTHS, [batch], param="standard", quantities=standard, **kw)
        self.assertFalse(r.passed)
        self.assertTrue(any("unstable, grows with width" in f for f in r.failures), r.failures)

    def test_llama3(self):
        self.both(TT.llama3, "mup")

    def test_qwen3_moe(self):
        # every quantity under mup-moe: the 3-D GroupedExperts' spectral norms are measured per
        # expert. Standard fails on its activations; its spectral norms are left out for time.
        self.assertIsNone(TT.MODELS["qwen3-moe"][3])
        self.both(TT.qwen3_moe, "mup-moe", standard=TT.NO_SPECTRAL)


if __name__ == "__main__":
    unittest.main()
