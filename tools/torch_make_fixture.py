#!/usr/bin/python3
"""Make the PyTorch-written safetensors fixture that tests/test_export.c imports.

Builds a tiny ViT in plain torch with timm's VisionTransformer names (the
model of tools/torch_check_export.py: pre-norm blocks, exact GELU, LayerNorm
eps 1e-5), gives it random weights from a fixed seed, runs it on a fixed
batch of random images in float32, and writes

  tests/data/torch_vit.safetensors  the weights (F32, timm names, the
        metadata vit_safetensors_load reads: dim, depth, heads, mlp, patch,
        image_height, image_width, channels, classes, global_pool,
        layer_norm_eps), written with json + struct (no safetensors
        package), in an order of its own (sorted by name, as the safetensors
        package writes), so the importer cannot rely on ours;
  tests/data/torch_vit_logits.txt   the input and PyTorch's logits as text:
        a line "B H W C K", then B*H*W*C image values (batch, row, column,
        channel - the library's layout) and B*K logits, one %.9g a line.

Run with Debian's torch (torch 1.13 and numpy): /usr/bin/python3
tools/torch_make_fixture.py [OUT_DIR].  The output is committed; the tests
do not need torch.
"""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check_export import ViT, config_from_meta  # noqa: E402  (the same model definition)

CFG = {"image_height": 4, "image_width": 4, "channels": 2, "classes": 3, "patch": 2,
       "dim": 8, "depth": 2, "heads": 2, "mlp": 12}
BATCH = 3


def write_safetensors(path, tensors, meta, names=None):
    """names: the order to write in; by default sorted by name, as the
    safetensors package writes (not timm's state_dict order)."""
    header = {"__metadata__": meta}
    blobs, offset = [], 0
    for name in names or sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"),
        help="the folder to write the two files to (default: tests/data)")
    out = ap.parse_args().out_dir
    torch.manual_seed(20240611)
    meta = {k: str(v) for k, v in CFG.items()}
    meta.update(global_pool="token", layer_norm_eps="1e-05")
    # ViT takes the keys of every feature (patch_stride, stem, lsa, ...):
    # the metadata read as torch_check_export.py reads an export.
    model = ViT(config_from_meta(meta))
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Not the init: LayerNorm gains away from 1, biases away from 0,
            # so that every tensor's layout matters to the logits.
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() > 1 else 0.3)
                    + (1.0 if name.endswith("norm1.weight") or name.endswith("norm2.weight")
                       or name == "norm.weight" else 0.0))
    model.eval()
    H, W, C = CFG["image_height"], CFG["image_width"], CFG["channels"]
    images = torch.rand(BATCH, C, H, W)  # NCHW in [0, 1]
    with torch.no_grad():
        logits = model(images)
    meta.update(format="pt",
                producer="tools/torch_make_fixture.py (torch %s)" % torch.__version__)
    write_safetensors(os.path.join(out, "torch_vit.safetensors"),
                      dict(model.state_dict()), meta)
    with open(os.path.join(out, "torch_vit_logits.txt"), "w") as f:
        f.write(f"{BATCH} {H} {W} {C} {CFG['classes']}\n")
        for v in images.permute(0, 2, 3, 1).reshape(-1).tolist():  # -> [B, H, W, C]
            f.write(f"{v:.9g}\n")
        for v in logits.reshape(-1).tolist():
            f.write(f"{v:.9g}\n")
    print(f"wrote {out}/torch_vit.safetensors and torch_vit_logits.txt "
          f"(logits {logits.tolist()})")


if __name__ == "__main__":
    main()
