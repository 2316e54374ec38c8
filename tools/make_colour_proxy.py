"""Colour proxies for small colour image sets, written as CIFAR-10 binary batches.

Usage: /usr/bin/python3 tools/make_colour_proxy.py fashion|digits OUT [--train 10000] [--test 2000] [--seed 1]
                                                   [--colours free|class]

Each image is a gray source image (Fashion-MNIST 28x28 from /usr/share/datasets/fashion-mnist,
or the shipped 8x8 digits upscaled) placed on a 32x32 canvas at a random offset and painted with
its own random foreground and background colours, so that colour carries no information about
the class: a model must learn shapes, as on small photo sets whose colours vary.  The gray value
g in [0, 1] becomes (1 - g) * background + g * foreground, per channel, colours drawn uniformly
in [0, 1]^3 and redrawn until the two differ by at least 0.3 in mean absolute value (otherwise
the shape would vanish).  With --colours class the background is instead the class's own colour
(one a class, drawn once from the seed) moved by up to 0.15 per channel, so that colour carries
much of the class, as on photo sets where the sky is blue and the grass green (the recipe's
colour test then finds it).

OUT gets data_batch_1.bin .. data_batch_5.bin (the training images split evenly, CIFAR-10's
layout: a label byte then 1024 red, 1024 green and 1024 blue bytes, each plane row by row),
test_batch.bin and batches.meta.txt (class names), which both `vit_train --data OUT` and
`tools/torch_cnn_ref.py --data OUT` read.  Needs numpy only.
"""
import argparse, gzip, os, struct, sys

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"
FASHION_NAMES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
                 "bag", "ankle-boot"]


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(folder, *words):
    for name in sorted(os.listdir(folder)):
        if all(w in name for w in words):
            return os.path.join(folder, name)
    sys.exit(f"make_colour_proxy: no file with {words} in {folder}")


def fashion():
    """(train images, train labels, test images, test labels), gray in [0, 1]."""
    out = []
    for part in ("train", "t10k"):
        x = read_idx(find(FASHION, part, "images")).astype(np.float32) / 255
        y = read_idx(find(FASHION, part, "labels")).astype(np.int64)
        out += [x, y]
    return out, FASHION_NAMES


def digits():
    here = os.path.dirname(os.path.abspath(__file__))
    rows = np.loadtxt(gzip.open(os.path.join(here, "..", "data", "digits.csv.gz"), "rt"),
                      delimiter=",", dtype=np.int64)
    x = rows[:, :64].reshape(-1, 8, 8).astype(np.float32) / 16
    x = np.kron(x, np.ones((3, 3), np.float32))  # 24x24, nearest neighbour
    y = rows[:, 64]
    return [x[:1437], y[:1437], x[1437:], y[1437:]], [str(k) for k in range(10)]


def colour(images, labels, rng, palette=None):
    """palette None: each image its own colours; else [classes, 3]: the class's background."""
    n, h, w = images.shape
    out = np.zeros((n, 32, 32, 3), np.float32)
    for i in range(n):
        while True:
            fg = rng.random(3)
            if palette is None:
                bg = rng.random(3)
            else:
                bg = np.clip(palette[labels[i]] + rng.uniform(-0.15, 0.15, 3), 0, 1)
            if np.abs(fg - bg).mean() >= 0.3:
                break
        dy, dx = rng.integers(0, 32 - h + 1), rng.integers(0, 32 - w + 1)
        canvas = np.zeros((32, 32), np.float32)
        canvas[dy:dy + h, dx:dx + w] = images[i]
        out[i] = (1 - canvas[..., None]) * bg + canvas[..., None] * fg
    return np.clip(np.rint(out * 255), 0, 255).astype(np.uint8)


def write_batch(path, images, labels):
    planar = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    rec = np.concatenate([labels.astype(np.uint8)[:, None], planar], axis=1)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(rec.tobytes())
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", choices=["fashion", "digits"])
    p.add_argument("out")
    p.add_argument("--train", type=int, default=10000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--colours", choices=["free", "class"], default="free",
                   help="free: each image its own colours (the default); class: the background's "
                   "colour is the class's, moved a little")
    a = p.parse_args()
    (xtr, ytr, xte, yte), names = fashion() if a.source == "fashion" else digits()
    rng = np.random.default_rng(a.seed)
    # A class-balanced subset in random order (all the digits: they are fewer).
    pick_tr = rng.permutation(len(xtr))[:a.train]
    pick_te = rng.permutation(len(xte))[:a.test]
    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit(f"make_colour_proxy: {a.out} exists and is not empty; give a new folder")
    os.makedirs(a.out, exist_ok=True)
    # drawn after the subsets, so that --colours free's files are as they were
    palette = rng.random((len(names), 3)) if a.colours == "class" else None
    tr = colour(xtr[pick_tr], ytr[pick_tr], rng, palette)
    te = colour(xte[pick_te], yte[pick_te], rng, palette)
    for k, part in enumerate(np.array_split(np.arange(len(tr)), 5)):
        write_batch(os.path.join(a.out, f"data_batch_{k + 1}.bin"), tr[part], ytr[pick_tr][part])
    write_batch(os.path.join(a.out, "test_batch.bin"), te, yte[pick_te])
    with open(os.path.join(a.out, "batches.meta.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    print(f"{a.out}: {len(tr)} train + {len(te)} test colour images of 32x32 ({a.source}, "
          f"colours {a.colours}, seed {a.seed})")


if __name__ == "__main__":
    main()
