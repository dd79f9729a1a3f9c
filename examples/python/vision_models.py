"""Vision models from torchvision and timm, built from their constructors (no weights), through
scaleinv.apply and scaleinv.coordcheck under mup and standard, with no overrides (issue 59). Prints
one block per model and its rows of the table in docs/python.md.

Each model is built at every width w with its own constructor; what grows:
  tv-vit      torchvision VisionTransformer: hidden_dim w, mlp_dim 2w, heads w/16 (d_head 16 fixed),
              2 layers, 16 x 16 images, 4 x 4 patches
  tv-swin     torchvision SwinTransformer (swin_t's structure, small): embed_dim w (2w after the patch
              merging), heads w/16 and 2w/16 (d_head 16), depths [2, 2], 4 x 4 windows (the second
              block of each stage shifted), 4 x 4 patches of 32 x 32 images
  tv-convnext torchvision ConvNeXt: stages of w and 2w channels, one CNBlock each (7 x 7 depthwise
              conv, layer scale 1e-6), 32 x 32 images
  tv-resnet   torchvision ResNet(Bottleneck, [1, 1, 1, 1], width_per_group=w): the constructor fixes
              the stages' outer channels (64 ... 512 x 4), so only the bottlenecks' inner width grows
              (w ... 8w: wide-ResNet scaling); BatchNorm, 32 x 32 images
  timm-vit    timm VisionTransformer: embed_dim w, heads w/16 (d_head 16), mlp_ratio 2, depth 2,
              16 x 16 images, 4 x 4 patches
  timm-convnext timm ConvNeXt: dims (w, w, 2w, 2w) (its constructor builds 4 stages), depths
              (1, 1, 1, 1), 32 x 32 images
  timm-resnet timm ResNet(BasicBlock, layers (1, 1, 1, 1), channels (w, w, 2w, 2w), the deep stem of
              stem_width w/2 (its plain 7 x 7 stem has 64 channels at every width)): the base
              channels grow; BatchNorm, 32 x 32 images

Each goes through the check with 3 seeds, 3 AdamW steps at lr 1e-3 on one batch of 8 random images
(10 classes, batch seed 0), in training mode (BatchNorm normalises over the batch).

    python examples/python/vision_models.py [--widths 64,128,256] [--seeds 3] [--steps 3] [--lr 1e-3]
        [--models tv-vit,tv-swin,...] [--batch-seed 0] [--threads N]

What it shares with hf_models.py and torchtitan_models.py (the checks, the verdicts, the table) is
in _model_check.py; model_table.py runs all three into one table.
"""
import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _model_check as mc  # noqa: E402
from _model_check import BATCH, D_HEAD  # noqa: E402

CLASSES = 10
FAMILY = "vision"
DEFAULT_WIDTHS = "64,128,256"
BATCH_TEXT = f"{BATCH} images"
ALL_EXPECTED = "as expected for every model"
TOLERANCE = True


def _tv():
    import torchvision
    return torchvision


def _timm():
    import timm
    return timm


def tv_vit(width):
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=width // D_HEAD, hidden_dim=width,
                             mlp_dim=2 * width, num_classes=CLASSES)


def tv_swin(width):
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=width, depths=[2, 2],
                           num_heads=[width // D_HEAD, 2 * width // D_HEAD], window_size=[4, 4], mlp_ratio=2.0,
                           stochastic_depth_prob=0.0, num_classes=CLASSES)


def tv_convnext(width):
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(width, 2 * width, 1), CNBlockConfig(2 * width, None, 1)], num_classes=CLASSES)


def tv_resnet(width):
    from torchvision.models.resnet import Bottleneck, ResNet
    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=CLASSES, width_per_group=width)


def timm_vit(width):
    from timm.models.vision_transformer import VisionTransformer
    return VisionTransformer(img_size=16, patch_size=4, num_classes=CLASSES, embed_dim=width, depth=2,
                             num_heads=width // D_HEAD, mlp_ratio=2.0)


def timm_convnext(width):
    from timm.models.convnext import ConvNeXt
    return ConvNeXt(num_classes=CLASSES, depths=(1, 1, 1, 1), dims=(width, width, 2 * width, 2 * width))


def timm_resnet(width):
    from timm.models.resnet import BasicBlock, ResNet
    return ResNet(BasicBlock, (1, 1, 1, 1), num_classes=CLASSES, channels=(width, width, 2 * width, 2 * width),
                  stem_type="deep",
                  stem_width=width // 2)


# name: (builder, library, class shown, image side, what the row shows)
MODELS = {
    "tv-vit": (tv_vit, "torchvision", "VisionTransformer", 16, "class token, position embedding, packed in_proj, zero-init head"),
    "tv-swin": (tv_swin, "torchvision", "SwinTransformer", 32, "window attention, relative position bias tables, patch merging"),
    "tv-convnext": (tv_convnext, "torchvision", "ConvNeXt", 32, "7x7 depthwise convs, layer scale [C, 1, 1]"),
    "tv-resnet": (tv_resnet, "torchvision", "ResNet", 32, "Bottleneck, BatchNorm; only width_per_group grows"),
    "timm-vit": (timm_vit, "timm", "VisionTransformer", 16, "class token, position embedding, fused qkv"),
    "timm-convnext": (timm_convnext, "timm", "ConvNeXt", 32, "7x7 depthwise convs, layer-scale gammas [C]"),
    "timm-resnet": (timm_resnet, "timm", "ResNet", 32, "BasicBlock, BatchNorm, zero-init last BN gains"),
}
DEFAULT_MODELS = ",".join(MODELS)


def version(lib):
    mod = _tv() if lib == "torchvision" else _timm()
    return mod.__version__.split("+")[0]


def missing(name):
    """None where the model's library (torchvision or timm) imports here, else why not."""
    lib = MODELS[name][1]
    try:
        version(lib)
    except Exception as exc:  # not installed, or built for another torch
        return f"{lib} is not importable here ({type(exc).__name__}: {exc})"[:200]
    return None


def libraries(names):
    return ", ".join(f"{lib} {version(lib)}" for lib in sorted({MODELS[n][1] for n in names}))


def batch(side, seed=0):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(BATCH, 3, side, side, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g)


def settings(args=None):
    """Nothing to set: the vision models run as torch leaves them."""
    return contextlib.nullcontext()


def run_model(name, widths, seeds, steps, lr, batch_seed):
    """The model's plan and its checks under mup and standard (_model_check.check_model)."""
    make, lib, cls, side, what = MODELS[name]
    res = mc.check_model(make, widths, batch(side, batch_seed), param="mup", seeds=seeds, steps=steps, lr=lr)
    res.update({"name": name, "class": cls, "what": what, "library": lib, "version": version(lib)})
    return res


def head_line(res):
    return f"{res['name']}: roles {mc.roles_text(res['roles'])}"


def note_shown(note):
    return True


# a model whose plan says in a note where the check fails (tv-resnet's normalized readouts) is
# expected to fail under mup; every other model to pass under mup and fail under standard
cannot_pass = mc.cannot_pass
expected = mc.expected


def main(argv=None):
    return mc.family_main(sys.modules[__name__], "vision_models.py", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
