"""Vision models from torchvision and timm built from their constructors, no weights (issue 59):
roles read from shapes (class tokens and position embeddings, Swin's relative position bias tables
and patch merging, ConvNeXt's depthwise convolutions and layer scales, ResNet's BatchNorm and
convolutions with fan-in in_ch * k * k), the coordinate check passing under mup and failing under
standard with no overrides, and torchvision's ResNet, whose constructor fixes the stream's channels,
named by the plan in one line per bottleneck where it cannot pass.

The models come from examples/python/vision_models.py (widths 32, 64, 128 here; 3 seeds, 3 AdamW
steps at lr 1e-3, the batch of batch seed 0). timm's rows skip where timm is missing (the oldest
leg; scripts/python_venv.sh pins it in the newest). On torch < 2.0 (the oldest leg: torch 1.13,
torchvision 0.14, which has every torchvision model here) the roles are checked and the coordinate
checks skipped: they take several times as long there (tv-swin's took 77 s against 7 s on torch
2.14 at these widths, on a busy machine), past this file's 30 s."""
import importlib.util
import os
import unittest

import torch

import scaleinv

try:
    import torchvision
except Exception as exc:  # not installed, or built for another torch
    torchvision, NO_TV = None, f"torchvision is not importable here ({type(exc).__name__}: {exc})"[:200]
else:
    NO_TV = ""
try:
    import timm
except Exception as exc:
    timm, NO_TIMM = None, f"timm is not importable here ({type(exc).__name__}: {exc})"[:200]
else:
    NO_TIMM = ""

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "vision_models.py")
WIDTHS = [32, 64, 128]
OLD_TORCH = int(torch.__version__.split(".")[0]) < 2
SLOW = "torch < 2.0 (the oldest leg): the coordinate checks take several times as long there, past this file's 30 s; roles are checked"


def load_example():
    spec = importlib.util.spec_from_file_location("vision_models", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def by_name(plan):
    return {t["name"]: t for t in plan["tensors"]}


_SAVED = {}


def setUpModule():
    _SAVED["threads"] = torch.get_num_threads()
    torch.set_num_threads(1)


def tearDownModule():
    torch.set_num_threads(_SAVED["threads"])


class _Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.vm = load_example()

    def plan(self, name):
        make = self.vm.MODELS[name][0]
        torch.manual_seed(0)
        return scaleinv.plan(make(128), make(32), make(64), param="mup")

    def role(self, t, name, role, fan_in=None, fan_out=None):
        r = t[name]
        self.assertEqual(r["role"], role, name)
        if fan_in is not None:
            self.assertEqual((r["fan_in"], r["fan_out"]), (fan_in, fan_out), name)


@unittest.skipIf(torchvision is None, NO_TV)
class TorchvisionRoles(_Base):
    def test_vit(self):
        t = by_name(self.plan("tv-vit"))
        self.role(t, "class_token", "vector")  # [1, 1, d]: one growing dimension
        self.role(t, "encoder.pos_embedding", "vector")  # [1, 17, d]
        self.role(t, "conv_proj.weight", "embedding", 3 * 4 * 4, 128)  # fan-in in_ch * k * k, fixed
        self.role(t, "encoder.layers.encoder_layer_0.self_attention.in_proj_weight", "hidden", 128, 384)
        self.role(t, "heads.head.weight", "readout", 128, 10)

    def test_swin(self):
        t = by_name(self.plan("tv-swin"))
        self.role(t, "features.0.0.weight", "embedding", 48, 128)  # the 4 x 4 patch embedding
        # [(2 * 4 - 1)^2, heads]: the heads grow with width (d_head fixed), the window offsets do not
        self.role(t, "features.1.0.attn.relative_position_bias_table", "vector")
        self.role(t, "features.1.1.attn.qkv.weight", "hidden", 128, 384)
        self.role(t, "features.2.reduction.weight", "hidden", 512, 256)  # patch merging 4C -> 2C
        self.role(t, "features.2.norm.weight", "vector")
        self.role(t, "features.3.0.attn.relative_position_bias_table", "vector")
        self.role(t, "head.weight", "readout", 256, 10)

    def test_convnext(self):
        t = by_name(self.plan("tv-convnext"))
        self.role(t, "features.1.0.block.0.weight", "embedding", 49, 128)  # depthwise 7 x 7: fan-in fixed
        self.role(t, "features.1.0.layer_scale", "vector")  # [C, 1, 1], 1e-6 at init
        self.role(t, "features.1.0.block.3.weight", "hidden", 128, 512)
        self.role(t, "features.2.1.weight", "hidden", 512, 256)  # the 2 x 2 downsampling conv: 128 * 2 * 2
        self.role(t, "classifier.2.weight", "readout", 256, 10)

    def test_resnet_names_the_normalized_readouts(self):
        p = self.plan("tv-resnet")
        t = by_name(p)
        self.role(t, "conv1.weight", "vector")  # the stem: 64 channels at every width
        self.role(t, "layer1.0.conv1.weight", "embedding", 64, 128)
        self.role(t, "layer1.0.conv2.weight", "hidden", 128 * 9, 128)
        self.role(t, "layer1.0.conv3.weight", "readout", 128, 256)  # back to the fixed stream
        self.role(t, "fc.weight", "vector")
        notes = [n for n in p["notes"] if "readout-like" in n]
        self.assertEqual(len(notes), 4)  # one per bottleneck
        self.assertTrue(notes[0].startswith("layer1.0.conv3 (Conv2d) is readout-like"), notes[0])
        self.assertIn("layer1.0.bn3 (BatchNorm2d) normalizes its output", notes[0])
        self.assertNotIn("\n", notes[0])
        # the final readout, read by no norm, is not named
        self.assertFalse(any(n.startswith("fc ") for n in p["notes"]))


@unittest.skipIf(timm is None, NO_TIMM)
class TimmRoles(_Base):
    def test_vit(self):
        t = by_name(self.plan("timm-vit"))
        self.role(t, "cls_token", "vector")
        self.role(t, "pos_embed", "vector")
        self.role(t, "patch_embed.proj.weight", "embedding", 48, 128)
        self.role(t, "blocks.0.attn.qkv.weight", "hidden", 128, 384)
        self.role(t, "head.weight", "readout", 128, 10)

    def test_convnext(self):
        t = by_name(self.plan("timm-convnext"))
        self.role(t, "stages.0.blocks.0.gamma", "vector")  # layer scale [C]
        self.role(t, "stages.0.blocks.0.conv_dw.weight", "embedding", 49, 128)
        self.role(t, "stages.2.downsample.1.weight", "hidden", 512, 256)
        self.role(t, "head.fc.weight", "readout", 256, 10)

    def test_resnet_batchnorm_and_zero_gains(self):
        make = self.vm.MODELS["timm-resnet"][0]
        torch.manual_seed(0)
        model = make(128)
        opt = scaleinv.apply(model, make(32), make(64), param="mup")
        t = by_name(opt.scaleinv_plan)
        self.role(t, "conv1.0.weight", "embedding", 27, 64)  # the deep stem's first conv
        self.role(t, "layer1.0.conv1.weight", "hidden", 128 * 9, 128)
        self.role(t, "layer3.0.downsample.0.weight", "hidden", 128, 256)  # 1 x 1, stride 2
        self.role(t, "layer1.0.bn1.weight", "vector")
        self.role(t, "fc.weight", "readout", 256, 10)
        # zero_init_last: each block's last BatchNorm gain starts at zero and stays zero after apply
        self.assertEqual(float(model.layer1[0].bn2.weight.abs().max()), 0.0)
        self.assertFalse(any("readout-like" in n for n in opt.scaleinv_plan["notes"]))


class _Check(_Base):
    def check(self, name, param):
        make, _, _, side, _ = self.vm.MODELS[name]
        return scaleinv.coordcheck(make, WIDTHS, [self.vm.batch(side, 0)], param=param, optimizer="adamw", lr=1e-3,
                                   steps=3, seeds=3, progress=False)

    def both(self, name):
        r = self.check(name, "mup")
        self.assertTrue(r.passed, "\n".join(r.failures))
        r = self.check(name, "standard")
        self.assertFalse(r.passed)
        self.assertTrue(any("unstable, grows with width" in f for f in r.failures), r.failures)


@unittest.skipIf(torchvision is None, NO_TV)
@unittest.skipIf(OLD_TORCH, SLOW)
class TorchvisionCheck(_Check):
    """mup passes and standard fails, no overrides."""

    def test_vit(self):
        self.both("tv-vit")

    def test_swin(self):
        self.both("tv-swin")

    def test_convnext(self):
        self.both("tv-convnext")


@unittest.skipIf(timm is None, NO_TIMM)
@unittest.skipIf(OLD_TORCH, SLOW)
class TimmCheck(_Check):
    def test_vit(self):
        self.both("timm-vit")

    def test_convnext(self):
        self.both("timm-convnext")

    def test_resnet(self):
        self.both("timm-resnet")


if __name__ == "__main__":
    unittest.main()
