#!/usr/bin/env python3
"""Check a Swin export (vit_export of an `arch = swin` model) in torchvision.

Rebuilds torchvision's own SwinTransformer (torchvision.models.swin_transformer,
v1: patch embedding, shifted windows with a relative position bias, patch
merging) from the file's metadata, loads the file with strict name and
shape checking, runs the test split and compares the logits with the CSV
that `vit_export --logits FILE` wrote: the largest |logit difference| must
be within --tol (1e-4) and every prediction must agree.

torchvision's patch convolution takes 3 channels; for other images the
check puts a Conv2d of the file's channel count in its place (same name,
features.0.0).  A model with a convolutional stem (stem > 0; stem2 > 0
too) has no torchvision counterpart: the export names it as our extension,
a Sequential called "stem" in front of features[0]'s patch convolution,
features.0.stem.{0: Conv2d 3x3 padding 1, 1: GELU, 2: Conv2d 4x4 stride 2
padding 1, 3: GELU} (docs/architectures.md), and the check builds exactly
that: torchvision's SwinTransformer with the module prepended to
features[0], whose patch convolution then reads the stem's channels.  The test split comes from --data (a folder of IDX files as
in tools/torch_check_export.py) or the digits.

The metadata keys read: image_height, image_width, channels, classes and
the Swin keys patch, window, window_w (the windows' columns: window's
when absent, square windows), embed_dim, stages, depth_1.., heads_1..,
mlp_ratio, stem and stem2 (0 when absent: files written before them); with
image_norm = 1 each test image is standardised per channel
first (its own mean and variance, as vit_image_norm), and with data_norm = 1
each channel normalised by data_mean and data_std (as vit_data_norm), as the
metadata's "input" says.  Needs torch, torchvision and numpy; not run by the tests.
Exit status 0 if everything agrees, 1 otherwise.

Usage:
  python3 tools/torch_check_swin.py model.safetensors --logits logits.csv \
      [--data DIR | --digits data/digits.csv.gz] [--tol 1e-4]
"""
import argparse
import os
import sys

import numpy as np
import torch
from collections import OrderedDict

from torch import nn
from torchvision.models.swin_transformer import SwinTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check_export import (data_norm_of, in_chunks, load_digits_test,  # noqa: E402
                                load_idx_test, norm_from_meta, normalise, read_logits,
                                read_safetensors)


def swin_config(meta):
    """The Swin's shape from an export's (or a fixture's) metadata."""
    cfg = {k: int(meta[k]) for k in ("image_height", "image_width", "channels", "classes",
                                     "patch", "window", "embed_dim", "stages", "mlp_ratio")}
    cfg["depths"] = [int(meta[f"depth_{s + 1}"]) for s in range(cfg["stages"])]
    cfg["heads"] = [int(meta[f"heads_{s + 1}"]) for s in range(cfg["stages"])]
    # the windows' columns: written only when they differ from the rows
    cfg["window_w"] = int(meta.get("window_w", cfg["window"]))
    cfg["stem"] = int(meta.get("stem", "0"))  # written since the Swin's stem
    cfg["stem2"] = int(meta.get("stem2", "0"))
    return norm_from_meta(meta, cfg)


def stem_module(cfg):
    """Our convolutional stem (vit's and swin's keys stem, stem2): a 3x3
    convolution and exact GELU, then a 4x4 one at stride 2 and GELU; None
    without one.  Returns the module and the channels it hands on."""
    if not cfg["stem"]:
        return None, cfg["channels"]
    layers = [nn.Conv2d(cfg["channels"], cfg["stem"], kernel_size=3, padding=1), nn.GELU()]
    if cfg["stem2"]:
        layers += [nn.Conv2d(cfg["stem"], cfg["stem2"], kernel_size=4, stride=2, padding=1),
                   nn.GELU()]
    return nn.Sequential(*layers), cfg["stem2"] or cfg["stem"]


def build_swin(cfg):
    """torchvision's SwinTransformer of cfg, in eval mode (no stochastic
    depth), with the patch convolution taking cfg's channels, and with a
    stem our module "stem" prepended to features[0] (its layers keep
    their names 0, 1, 2, so their parameters keep torchvision's)."""
    P = cfg["patch"]
    model = SwinTransformer(patch_size=[P, P], embed_dim=cfg["embed_dim"], depths=cfg["depths"],
                            num_heads=cfg["heads"],
                            window_size=[cfg["window"], cfg.get("window_w", cfg["window"])],
                            mlp_ratio=float(cfg["mlp_ratio"]), stochastic_depth_prob=0.0,
                            num_classes=cfg["classes"])
    stem, cin = stem_module(cfg)
    model.features[0][0] = nn.Conv2d(cin, cfg["embed_dim"], kernel_size=P, stride=P)
    if stem is not None:
        patch = model.features[0]
        model.features[0] = nn.Sequential(OrderedDict(
            [("stem", stem)] + [(name, layer) for name, layer in patch.named_children()]))
    return model.eval()


def load_state(model, tensors):
    """Loads our tensors strictly: every name and shape, apart from the
    relative_position_index buffers, which torchvision computes itself."""
    state = model.state_dict()
    theirs = {k for k in state if not k.endswith("relative_position_index")}
    if set(tensors) != theirs:
        missing, extra = sorted(theirs - set(tensors)), sorted(set(tensors) - theirs)
        sys.exit(f"tensor names differ from torchvision's: missing {missing[:5]}, "
                 f"unexpected {extra[:5]}")
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(state[k].shape):
            sys.exit(f"{k}: shape {tuple(v.shape)}, torchvision's {tuple(state[k].shape)}")
        state[k] = v
    model.load_state_dict(state, strict=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="safetensors file written by vit_export")
    ap.add_argument("--logits", required=True, help="CSV written by vit_export --logits")
    ap.add_argument("--digits", default=os.path.join(here, "..", "data", "digits.csv.gz"))
    ap.add_argument("--data", help="a folder of IDX files to take the test split from")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed |logit difference|")
    args = ap.parse_args()

    tensors, meta = read_safetensors(args.model)
    cfg = swin_config(meta)
    images, labels = load_idx_test(args.data) if args.data else load_digits_test(args.digits)
    if tuple(images.shape[1:]) != (cfg["channels"], cfg["image_height"], cfg["image_width"]):
        sys.exit(f"test images {tuple(images.shape[1:])} do not fit the model's "
                 f"{cfg['image_height']}x{cfg['image_width']}x{cfg['channels']}")
    # the model's input normalisation (metadata "input"), as our forward does it
    images = normalise(images, cfg["image_norm"], data_norm_of(cfg))
    model = build_swin(cfg)
    load_state(model, tensors)
    print(f"{args.model}: {len(tensors)} tensors, "
          f"{sum(t.numel() for t in tensors.values())} parameters, loaded strictly into "
          f"torchvision's SwinTransformer (patch {cfg['patch']}, window "
          f"{cfg['window']}x{cfg['window_w']}, "
          f"depths {cfg['depths']}, heads {cfg['heads']}"
          + (f", our stem {cfg['stem']}/{cfg['stem2']} in front" if cfg["stem"] else "") + ")")
    with torch.no_grad():
        logits = in_chunks(model, images)
    pred = logits.argmax(dim=1).numpy()
    our_labels, our_pred, ours = read_logits(args.logits)
    if ours.shape != tuple(logits.shape) or not (our_labels == labels).all():
        sys.exit(f"{args.logits}: {ours.shape} logits / labels do not match the test split")
    diff = np.abs(ours - logits.numpy().astype(np.float64)).max()
    agree = int((our_pred == pred).sum())
    print(f"torchvision float32: accuracy {float((pred == labels).mean()):.4f}; ours "
          f"{float((our_pred == labels).mean()):.4f}; predictions agree on "
          f"{agree}/{len(labels)}")
    print(f"max |logit difference| {diff:.3g} (largest |logit| {np.abs(ours).max():.3g})")
    ok = diff <= args.tol and agree == len(labels)
    print("OK: torchvision reproduces our Swin" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
