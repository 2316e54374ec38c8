#!/usr/bin/env python3
"""Writes tests/data/swin_torch.safetensors and tests/data/swin_torch_logits.txt:
a small Swin written by torchvision itself, for tests/test_swin.c to load
and reproduce without Python; with --wide, swin_torch_wide.safetensors and
swin_torch_wide_logits.txt instead, with --rect swin_torch_rect.* (below).

The model is torchvision's SwinTransformer (v1) on 8x8 images of 2
channels (its patch convolution replaced by one of 2 channels): patch 2, a
4x4 grid in windows of 2 (the second block shifted by 1), merged to 2x2
(one window: torchvision drops the shift), widths 4 and 8, two heads
each, MLP ratio 2, 3 classes: the config of test_swin.c's gradient check.
Every parameter is drawn from a seeded uniform in [-0.5, 0.5) (layer-norm
gains around 1), so that no tensor's layout could hide behind zeros or
ones.  The weights go out in torchvision's names and layouts (safetensors,
F32, metadata: the config); the text file holds 4 images [B, H, W, C] and
torchvision's float64 logits:

  line 1: B H W C K
  then B*H*W*C pixel values, then B*K logits, whitespace-separated.

The --wide model is the same on 8x16 images: a 4x8 grid (windows of 2,
block 1 shifted by 1 on both axes), merged to 2x4, where one window covers
the rows but not the columns: torchvision shifts that stage's second block
by 0 rows and 1 column (each axis decides alone), which a shift dropped on
both axes whenever one is covered does not reproduce.

The --rect model is the same on 8x12 images in windows of 2 rows by 3
columns (window_size [2, 3], window_w 3 in the metadata): a 4x6 grid
whose second block torchvision shifts by 1 row and 1 column (2 // 2, 3 // 2)
and whose relative position tables are [(2*2-1)*(2*3-1), heads] = [15, 2],
merged to 2x3, one window (no shift).

Needs torch, torchvision and numpy; run by hand:
  python3 tools/torch_swin_fixture.py [--out tests/data] [--wide | --rect]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check_swin import build_swin  # noqa: E402

META = {"arch": "swin", "image_height": "8", "image_width": "8", "channels": "2",
        "classes": "3", "patch": "2", "window": "2", "embed_dim": "4", "stages": "2",
        "depth_1": "2", "depth_2": "2", "heads_1": "2", "heads_2": "2", "mlp_ratio": "2",
        "layout": "torchvision.SwinTransformer"}


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        data = t.detach().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data"))
    ap.add_argument("--wide", action="store_true", help="the 8x16 model (one shift per axis)")
    ap.add_argument("--rect", action="store_true", help="the 8x12 model in windows of 2x3")
    args = ap.parse_args()
    torch.manual_seed(45)
    meta, stem = dict(META), "swin_torch"
    if args.wide:
        meta["image_width"], stem = "16", "swin_torch_wide"
    if args.rect:
        meta["image_width"], meta["window_w"], stem = "12", "3", "swin_torch_rect"
    cfg = {k: int(v) for k, v in meta.items() if k not in ("arch", "layout")
           and not k.startswith(("depth_", "heads_"))}
    cfg["depths"], cfg["heads"] = [2, 2], [2, 2]
    cfg["stem"] = cfg["stem2"] = 0  # build_swin's keys since the stem: none here
    model = build_swin(cfg)
    tensors = {}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name.endswith("relative_position_index"):
                continue
            v = torch.rand(p.shape) - 0.5
            if "norm" in name and name.endswith("weight"):
                v += 1.0
            p.copy_(v)
            tensors[name] = p.clone()
        B, H, W, C, K = 4, cfg["image_height"], cfg["image_width"], 2, 3
        images = torch.rand(B, H, W, C)
        logits = model.double()(images.double().permute(0, 3, 1, 2))
    write_safetensors(os.path.join(args.out, stem + ".safetensors"), tensors, meta)
    with open(os.path.join(args.out, stem + "_logits.txt"), "w") as f:
        f.write(f"{B} {H} {W} {C} {K}\n")
        f.write(" ".join(f"{v:.9g}" for v in images.flatten().tolist()) + "\n")
        f.write(" ".join(f"{v:.17g}" for v in logits.flatten().tolist()) + "\n")
    print(f"wrote {len(tensors)} tensors and {B} images' logits to {args.out}")


if __name__ == "__main__":
    main()
