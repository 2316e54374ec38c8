#!/usr/bin/env python3
"""Check a vit_export safetensors file in PyTorch.

Builds a minimal ViT in plain torch with timm's VisionTransformer parameter
names (pre-norm blocks, exact GELU, LayerNorm eps 1e-5, class-token or mean
pooling; with lsa = 1 in the metadata, locality self-attention and its
blocks.L.attn.tau, and with local_conv = 1 each block's depthwise 3x3
convolution of the patch tokens, blocks.L.local, both of which timm lacks;
with image_norm = 1 each image standardised per channel first, as vit_image_norm,
and with data_norm = 1 each channel normalised by the metadata's data_mean and
data_std, as torchvision's Normalize does),
loads the file with strict name and
shape checking, runs a test split and compares with our own results.  The
test split is the 8x8 digits' (the last 360 images of data/digits.csv.gz,
pixels value/16, images [B, 1, 8, 8]), or with --data DIR that of a folder
of MNIST-style IDX files (t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte,
gzipped or not, as vit_train reads them: pixels value/255, an idx4 file's
[N, H, W, C] for colour), e.g. Debian's /usr/share/datasets/fashion-mnist:

  --logits FILE    the CSV that `vit_export --logits FILE` wrote: the largest
                   |logit difference|, and whether every prediction agrees;
  --accuracy ACC   the test accuracy that vit_eval printed: with the model's
                   tta shift9 or shift9flip (metadata tta), PyTorch's is
                   predict_tta's (the nine one-pixel shifts, and for
                   shift9flip also those of the mirror image).

The safetensors file is parsed with json + numpy (no safetensors package).
Needs torch and numpy; not run by the tests.  Exit status 0 if everything
agrees (logits within --tol, default 1e-4), 1 otherwise.

Usage:
  python3 tools/torch_check_export.py model.safetensors --logits logits.csv \
      [--accuracy 0.9750] [--digits data/digits.csv.gz | --data DIR]
"""
import argparse
import csv
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn

N_TRAIN = 1437  # vit_data_load("digits"): the first 1437 lines train, the rest test


def read_safetensors(path):
    """Returns ({name: float32 tensor}, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        sys.exit(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} has dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.astype(np.float32))
    return tensors, meta


class Attention(nn.Module):
    """timm's attention; with lsa (locality self-attention), each head's
    scores are Q K^T times its learnt tau (blocks.L.attn.tau, in place of
    1/sqrt(head dim)) and no token attends itself."""

    def __init__(self, dim, heads, lsa=False):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.tau = nn.Parameter(torch.zeros(heads)) if lsa else None

    def forward(self, x):
        B, N, D = x.shape
        hd = D // self.heads
        # Columns h*hd .. h*hd+hd-1 of q, k and v belong to head h.
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.tau is None:
            attn = (q @ k.transpose(-2, -1)) * hd ** -0.5
        else:
            attn = (q @ k.transpose(-2, -1)) * self.tau.view(1, -1, 1, 1)
            self_mask = torch.eye(N, dtype=torch.bool, device=x.device)
            attn = attn.masked_fill(self_mask, float("-inf"))
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # exact (erf) GELU, as ours
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, eps, lsa=False, grid=None):
        super().__init__()
        # local_conv: blocks.L.local.weight [D, 1, 3, 3] and blocks.L.local.bias
        self.local = nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim) if grid else None
        self.grid = grid
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads, lsa)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        if self.local is not None:  # the patch tokens on their grid, plus their 3x3 depthwise conv
            B, T, D = x.shape
            p = x[:, 1:].transpose(1, 2).reshape(B, D, *self.grid)
            p = p + self.local(p)
            x = torch.cat([x[:, :1], p.flatten(2).transpose(1, 2)], dim=1)
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    """The patches; with stem > 0, of the feature map of a 3x3 convolution
    and GELU, and with stem2 > 0 too, of a 4x4 convolution at stride 2 and
    GELU after it (timm's hybrid patch embedding: backbone, then proj)."""

    def __init__(self, channels, dim, patch, stride, pad, stem=0, stem2=0):
        super().__init__()
        if stem:
            layers = [nn.Conv2d(channels, stem, kernel_size=3, padding=1), nn.GELU()]
            channels = stem
            if stem2:
                layers += [nn.Conv2d(stem, stem2, kernel_size=4, stride=2, padding=1), nn.GELU()]
                channels = stem2
            self.backbone = nn.Sequential(*layers)
        else:
            self.backbone = None
        self.proj = nn.Conv2d(channels, dim, kernel_size=patch, stride=stride, padding=pad)

    def forward(self, x):
        if self.backbone is not None:
            x = self.backbone(x)
        # [B, D, gh, gw] -> [B, N, D], patches row by row
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, P = cfg["dim"], cfg["patch"]
        S, Z = cfg["patch_stride"] or P, cfg["patch_pad"]  # overlapping patches: a strided conv
        # the patches are cut from stem2's half-size map when there is one
        H, W = (cfg["image_height"], cfg["image_width"]) if not cfg["stem2"] else \
            (cfg["image_height"] // 2, cfg["image_width"] // 2)
        grid = ((H + 2 * Z - P) // S + 1, (W + 2 * Z - P) // S + 1)
        T = grid[0] * grid[1] + 1
        eps = float(cfg["layer_norm_eps"])
        self.pool = cfg["global_pool"]
        self.image_norm = cfg["image_norm"]
        self.data_norm = data_norm_of(cfg)
        self.patch_embed = PatchEmbed(cfg["channels"], D, P, S, Z, cfg["stem"], cfg["stem2"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, T, D))
        self.blocks = nn.ModuleList(
            [Block(D, cfg["heads"], cfg["mlp"], eps, cfg["lsa"], grid if cfg["local_conv"] else None)
             for _ in range(cfg["depth"])])
        self.norm = nn.LayerNorm(D, eps=eps)
        self.head = nn.Linear(D, cfg["classes"])

    def forward(self, x):
        x = normalise(x, self.image_norm, self.data_norm)
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        x = x[:, 0] if self.pool == "token" else x[:, 1:].mean(dim=1)
        return self.head(x)


def data_norm_of(cfg):
    """data_norm's per-channel mean and std as [1, C, 1, 1] float64 tensors,
    or None (cfg from config_from_meta)."""
    if cfg["data_mean"] is None:
        return None
    return (torch.tensor(cfg["data_mean"], dtype=torch.float64).view(1, -1, 1, 1),
            torch.tensor(cfg["data_std"], dtype=torch.float64).view(1, -1, 1, 1))


def normalise(x, image_norm, data_norm):
    """The model's input normalisation of images x [B, C, H, W], as the
    export's metadata "input" says: with image_norm each image's channels by
    their own mean m and (biased) variance v, (x - m) / sqrt(v + 1e-4)
    (vit_image_norm); with data_norm = (mean, std), (x - mean[c]) / std[c]
    (vit_data_norm); in float64 as ours, back to x's dtype."""
    if image_norm:
        d = x.double()
        m = d.mean(dim=(2, 3), keepdim=True)
        v = ((d - m) ** 2).mean(dim=(2, 3), keepdim=True)
        x = ((d - m) / torch.sqrt(v + 1e-4)).to(x.dtype)  # VIT_IMAGE_NORM_EPS
    if data_norm is not None:
        mean, std = data_norm
        x = ((x.double() - mean) / std).to(x.dtype)
    return x


def norm_from_meta(meta, cfg):
    """image_norm and data_norm's figures into cfg, from an export's
    metadata: each written only when on."""
    cfg["image_norm"] = bool(int(meta.get("image_norm", "0")))
    on = bool(int(meta.get("data_norm", "0")))
    cfg["data_mean"] = [float(v) for v in meta["data_mean"].split(",")] if on else None
    cfg["data_std"] = [float(v) for v in meta["data_std"].split(",")] if on else None
    return cfg


def predict_tta(model, x, flip=False):
    """tta shift9 (shift9flip with flip) as vit_predict does it: the mean
    softmax over the image and its 8 one-pixel shifts, zeros shifted in
    (src/data/augment.c vit_translate: pixel (y, x) of the image shifted by
    (dy, dx) is pixel (y - dy, x - dx) of x, zero outside); with flip, also
    over the same nine shifts of the left-right mirror image (mirrored
    first, then shifted).  x: [N, C, H, W]."""
    H, W = x.shape[-2:]
    probs = 0
    for image in (x, x.flip(-1)) if flip else (x,):
        xp = nn.functional.pad(image, (1, 1, 1, 1))  # a border of zeros
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                shifted = xp[..., 1 - dy:1 - dy + H, 1 - dx:1 - dx + W]
                probs = probs + model(shifted).softmax(-1)
    return probs / (18 if flip else 9)


def in_chunks(fn, x, size=500):
    """fn over x a chunk of images at a time (10,000 images at once hold
    gigabytes of attention scores and run slower, not faster)."""
    return torch.cat([fn(x[i:i + size]) for i in range(0, len(x), size)])


def load_digits_test(path):
    with gzip.open(path, "rt") as f:
        rows = [line for line in f.read().splitlines() if line.strip()]
    values = np.array([[int(v) for v in r.split(",")] for r in rows[N_TRAIN:]])
    images = (values[:, :64] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    return torch.from_numpy(images), values[:, 64]


def read_idx(path):
    """One IDX file (gzipped or not) as a numpy array of its dimensions."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        blob = f.read()
    if len(blob) < 4 or blob[0] != 0 or blob[1] != 0 or blob[2] != 0x08:
        sys.exit(f"{path}: not an IDX file of unsigned bytes")
    rank = blob[3]
    dims = struct.unpack(f">{rank}I", blob[4:4 + 4 * rank])
    count = int(np.prod(dims))
    if len(blob) != 4 + 4 * rank + count:
        sys.exit(f"{path}: {len(blob)} bytes, dimensions {dims} want {4 + 4 * rank + count}")
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def find_file(folder, *names):
    for name in names:
        for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
            if os.path.exists(path):
                return path
    sys.exit(f"{folder}: no {' or '.join(names)} (or .gz)")


def load_idx_test(folder):
    """The test split of an IDX folder, as vit_data_load_idx reads it:
    pixels value/255, images [N, C, H, W]."""
    pixels = read_idx(find_file(folder, "t10k-images-idx3-ubyte", "t10k-images-idx4-ubyte"))
    labels = read_idx(find_file(folder, "t10k-labels-idx1-ubyte"))
    if pixels.ndim == 3:
        pixels = pixels[:, None, :, :]
    elif pixels.ndim == 4:
        pixels = pixels.transpose(0, 3, 1, 2)  # idx4 holds [N, H, W, C]
    else:
        sys.exit(f"{folder}: test images of rank {pixels.ndim}, expected 3 or 4")
    if labels.ndim != 1 or len(labels) != len(pixels):
        sys.exit(f"{folder}: {len(labels)} test labels for {len(pixels)} images")
    images = (pixels.astype(np.float32) / np.float32(255)).copy()
    return torch.from_numpy(images), labels.astype(int)


def read_logits(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        if header[:3] != ["index", "label", "pred"]:
            sys.exit(f"{path}: not a vit_export --logits file (header {header[:3]})")
        rows = [[float(v) for v in row] for row in r if row]
    a = np.array(rows)
    return a[:, 1].astype(int), a[:, 2].astype(int), a[:, 3:]


def config_from_meta(meta):
    """The config ViT takes, from an export's metadata (a dict of strings).
    A key written only since its feature appeared gets the value that means
    the plain model, so older files (and the fixtures' own configs) load."""
    cfg = {k: int(meta[k]) for k in ("dim", "depth", "heads", "mlp", "patch", "image_height",
                                     "image_width", "channels", "classes")}
    # Written since overlapping patches; absent in older files: the plain stride-P conv.
    cfg["patch_stride"] = int(meta.get("patch_stride", "0"))
    cfg["patch_pad"] = int(meta.get("patch_pad", "0"))
    cfg["stem"] = int(meta.get("stem", "0"))  # written since the convolutional stem
    cfg["stem2"] = int(meta.get("stem2", "0"))  # and since its second layer
    cfg["lsa"] = bool(int(meta.get("lsa", "0")))  # adds blocks.L.attn.tau, not timm's
    cfg["local_conv"] = bool(int(meta.get("local_conv", "0")))  # adds blocks.L.local, likewise
    norm_from_meta(meta, cfg)  # image_norm, data_norm's figures
    cfg["global_pool"] = meta.get("global_pool", "token")
    cfg["layer_norm_eps"] = meta.get("layer_norm_eps", "1e-05")
    return cfg


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="safetensors file written by vit_export")
    ap.add_argument("--logits", help="CSV written by vit_export --logits")
    ap.add_argument("--accuracy", type=float, help="test accuracy printed by vit_eval")
    ap.add_argument("--digits", default=os.path.join(here, "..", "data", "digits.csv.gz"))
    ap.add_argument("--data", help="a folder of IDX files to take the test split from "
                    "(the one given to vit_export --data); default: the digits")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed |logit difference|")
    args = ap.parse_args()

    tensors, meta = read_safetensors(args.model)
    cfg = config_from_meta(meta)
    images, labels = load_idx_test(args.data) if args.data else load_digits_test(args.digits)
    shape = tuple(images.shape[1:])  # [C, H, W]
    if shape != (cfg["channels"], cfg["image_height"], cfg["image_width"]):
        sys.exit(f"{args.data or args.digits}: test images of {shape[1]}x{shape[2]}x{shape[0]}; "
                 f"the model expects {cfg['image_height']}x{cfg['image_width']}x{cfg['channels']}")
    model = ViT(cfg)
    model.load_state_dict(tensors, strict=True)  # every name and shape must match
    model.eval()
    print(f"{args.model}: {len(tensors)} tensors, "
          f"{sum(t.numel() for t in tensors.values())} parameters, loaded strictly; "
          f"dim {cfg['dim']}, depth {cfg['depth']}, heads {cfg['heads']}, pool {cfg['global_pool']}"
          f"{', lsa' if cfg['lsa'] else ''}{', local_conv' if cfg['local_conv'] else ''}"
          f"{', image_norm' if cfg['image_norm'] else ''}"
          f"{', data_norm' if cfg['data_mean'] else ''}")

    with torch.no_grad():
        logits = in_chunks(model, images)
        logits64 = in_chunks(model.double(), images.double())
        tta = meta.get("tta", "none")
        tta = tta if tta in ("shift9", "shift9flip") else None
        model.float()  # .double() above converted the model in place: back to float32
        tta_pred = in_chunks(lambda x: predict_tta(model, x, flip=tta == "shift9flip"),
                             images).argmax(dim=1).numpy() if tta else None
    pred = logits.argmax(dim=1).numpy()
    acc = float((pred == labels).mean())
    print(f"PyTorch float32: test split {len(labels)} images, accuracy {acc:.4f} (one pass)")
    if tta:
        tta_acc = float((tta_pred == labels).mean())
        print(f"PyTorch float32, tta {tta} (predict_tta): accuracy {tta_acc:.4f}")
    ok = True
    if args.accuracy is not None:
        mine = tta_acc if tta else acc
        same = abs(mine - args.accuracy) < 5e-5  # vit_eval prints 4 decimals
        print(f"vit_eval accuracy {args.accuracy:.4f}{f' (tta {tta})' if tta else ''}: "
              f"{'same' if same else 'DIFFERENT'}")
        ok &= same
    if args.logits:
        our_labels, our_pred, ours = read_logits(args.logits)
        if ours.shape != tuple(logits.shape) or not (our_labels == labels).all():
            sys.exit(f"{args.logits}: {ours.shape} logits / labels do not match the test split")
        diff = np.abs(ours - logits.numpy().astype(np.float64)).max()
        diff64 = np.abs(ours - logits64.numpy()).max()
        agree = int((our_pred == pred).sum())
        our_acc = float((our_pred == labels).mean())
        print(f"ours: accuracy {our_acc:.4f}; predictions agree on {agree}/{len(labels)} images")
        print(f"max |logit difference|: {diff:.3g} vs PyTorch float32, "
              f"{diff64:.3g} vs PyTorch float64 (largest |logit| {np.abs(ours).max():.3g})")
        ok &= diff <= args.tol and agree == len(labels)
    print("OK: PyTorch reproduces our model" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
