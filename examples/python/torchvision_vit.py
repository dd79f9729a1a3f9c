"""torchvision's VisionTransformer under scaleinv, as published: no overrides, no edits to the model.

Its class token [1, 1, d] and position embedding [1, n, d] are bare parameters (vector-like: one
growing dimension), its attention packs q, k, v in in_proj_weight [3d, d] (hidden), and its head
is zero-initialized, so at step 0 every gradient below the head is exactly zero: a state the check
reports, not a failure. The check runs widths 64..256 (num_heads = width / 32), 3 seeds, 3 AdamW
steps at lr 1e-2 on a fixed batch of 8 random 16x16 images, under mup and under standard.

    pip install .            # (the repository root; scripts/setup.sh has the Debian packages)
    python examples/python/torchvision_vit.py
"""
import torch
from torchvision.models.vision_transformer import VisionTransformer

import scaleinv


def vit(width):
    return VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=width // 32,
                             hidden_dim=width, mlp_dim=4 * width, num_classes=10)


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g))
    plan = scaleinv.plan(vit(256), base=vit(64), delta=vit(128), param="mup")
    for t in plan["tensors"]:
        if t["name"] in ("class_token", "encoder.pos_embedding", "conv_proj.weight", "heads.head.weight",
                         "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"):
            print(f"{t['name']:<62} {t['role']:<9} lr x{t['lr']:.3g}  ({t['why']})")
    for param in ("mup", "standard"):
        r = scaleinv.coordcheck(vit, widths=[64, 128, 256], batches=[batch], param=param, optimizer="adamw",
                                lr=1e-2, steps=3, seeds=3, progress=False, quantities=["h", "dh", "h'", "W'", "dW"])
        zero = sum(1 for row in r.rows if row["zero"])
        print(f"{param:<9} {'PASS' if r.passed else 'FAIL'}: {len(r.rows)} rows, {zero} zero at every width "
              f"(step 0 below the zero-init head, and step 1 before updates reach them), {len(r.failures)} failures")
        for f in r.failures[:3]:
            print("   ", f[:110])


if __name__ == "__main__":
    main()
