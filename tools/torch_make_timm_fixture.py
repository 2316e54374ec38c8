#!/usr/bin/python3
"""Make the timm-layout fixture that tests/test_finetune.c imports.

A small ViT with the layout of timm's VisionTransformer (vit_tiny_patch16_224's
patch 16 at 224 pixels, 14x14 grid, class token, LayerNorm eps 1e-6, exact
GELU, qkv bias; dim 32, depth 2, heads 2, mlp 128 and 5 classes so that the
file stays small), random weights from a fixed seed, written as timm's hub
writes a state_dict: F32 tensors under timm's names in state_dict order and
the metadata {"format": "pt"} alone.  Then PyTorch's logits, in float32:

  - at 224: of 32 images x in [0, 1] normalised with ImageNet's mean and std
    ((x - mean) / std per channel, as timm's data config does);
  - at 112: of 32 more images at 112x112, by the same model with pos_embed's
    14x14 grid resampled to 7x7 with F.interpolate(mode="bicubic",
    align_corners=False) and the class token's row kept (timm's
    resample_abs_pos_embed);
  - and a position-embedding resampling alone, in float64: 1 + 4x4 rows of
    width 3 to 3x5 and to 6x7.

The images are not stored: both sides draw them from xorshift32 (seed
2463534242, image values (s >> 24) / 255 in [batch, row, column, channel]
order, the 224 set then the 112 set).

  tests/data/timm_vit.safetensors   the weights (about 230 KB)
  tests/data/timm_vit_ref.txt       "NAME COUNT" lines, each followed by its
                                    COUNT values, one %.9g (%.17g in float64)
                                    a line: logits224 [32, 5], logits112
                                    [32, 5], pos_src [17, 3], pos_3x5 [16, 3],
                                    pos_6x7 [43, 3]

Run with Debian's torch: /usr/bin/python3 tools/torch_make_timm_fixture.py
[OUT_DIR].  The output is committed; the tests do not need torch.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check_export import ViT  # noqa: E402  (timm's layout, plain torch)
from torch_make_fixture import write_safetensors  # noqa: E402

CFG = {"image_height": 224, "image_width": 224, "channels": 3, "classes": 5, "patch": 16,
       "dim": 32, "depth": 2, "heads": 2, "mlp": 128, "patch_stride": 0, "patch_pad": 0,
       "stem": 0, "stem2": 0, "lsa": False, "local_conv": 0, "global_pool": "token",
       "layer_norm_eps": "1e-6"}
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
BATCH = 32


class XorShift32:
    def __init__(self, seed):
        self.s = seed

    def images(self, n, h, w, c):
        out = []
        s = self.s
        for _ in range(n * h * w * c):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            out.append((s >> 24) / 255.0)
        self.s = s
        # [n, h, w, c] -> NCHW
        return torch.tensor(out, dtype=torch.float32).view(n, h, w, c).permute(0, 3, 1, 2)


def timm_order(sd, depth):
    names = ["cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias"]
    for i in range(depth):
        names += ["blocks.%d.%s" % (i, n) for n in (
            "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
            "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
            "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")]
    names += ["norm.weight", "norm.bias", "head.weight", "head.bias"]
    assert sorted(names) == sorted(sd), set(names) ^ set(sd)
    return names


def resample(pos, g, n):
    """pos [1, 1 + g*g, D] -> [1, 1 + n[0]*n[1], D] as timm's resample_abs_pos_embed."""
    prefix, grid = pos[:, :1], pos[:, 1:]
    D = pos.shape[-1]
    grid = grid.reshape(1, g[0], g[1], D).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=n, mode="bicubic", align_corners=False)
    return torch.cat([prefix, grid.permute(0, 2, 3, 1).reshape(1, -1, D)], dim=1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
    torch.manual_seed(47)
    model = ViT(CFG)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Not timm's init: gains away from 1 and biases away from 0, so
            # that every tensor's layout matters to the logits.
            gain = name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                or name == "norm.weight"
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2) + (1.0 if gain else 0.0))
        model.patch_embed.proj.weight.mul_(0.25)  # 768 inputs per patch
    model.eval()
    sd = dict(model.state_dict())
    write_safetensors(os.path.join(out, "timm_vit.safetensors"), sd, {"format": "pt"},
                      timm_order(sd, CFG["depth"]))

    rng = XorShift32(2463534242)
    x224 = rng.images(BATCH, 224, 224, 3)
    x112 = rng.images(BATCH, 112, 112, 3)
    with torch.no_grad():
        logits224 = model((x224 - MEAN) / STD)
        small = ViT(dict(CFG, image_height=112, image_width=112))
        sd112 = dict(sd, pos_embed=resample(sd["pos_embed"], (14, 14), (7, 7)))
        small.load_state_dict(sd112)
        small.eval()
        logits112 = small((x112 - MEAN) / STD)
    torch.manual_seed(7)
    pos = torch.randn(1, 17, 3, dtype=torch.float64)
    cases = [("logits224", logits224, "%.9g"), ("logits112", logits112, "%.9g"),
             ("pos_src", pos, "%.17g"), ("pos_3x5", resample(pos, (4, 4), (3, 5)), "%.17g"),
             ("pos_6x7", resample(pos, (4, 4), (6, 7)), "%.17g")]
    with open(os.path.join(out, "timm_vit_ref.txt"), "w") as f:
        for name, t, fmt in cases:
            flat = t.reshape(-1).tolist()
            f.write("%s %d\n" % (name, len(flat)))
            for v in flat:
                f.write(fmt % v + "\n")
    print("wrote %s/timm_vit.safetensors and timm_vit_ref.txt (logits224[0] %s)"
          % (out, logits224[0].tolist()))


if __name__ == "__main__":
    main()
