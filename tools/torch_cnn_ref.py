"""A small PyTorch CNN trained for a time budget: the reference a user would pick instead of a ViT.

Usage: /usr/bin/python3 tools/torch_cnn_ref.py --data SET [--budget 10m] [--seed 1] [--threads 2] [--flip]

SET is what `vit_train --data` reads, in the layouts that have their own test set: `digits` (the
shipped CSV, first 1437 images train, the 360 after them test, as vit_train), a folder of IDX
files (Fashion-MNIST: train-*/t10k-*), a folder of CIFAR-10 binary batches (data_batch_*.bin,
test_batch.bin), or a folder with train/ and test/ class folders of PNG/JPEG files of one size
(needs python3-pil).  A flat folder of class folders is refused: vit_train's split of it is its
own, so give both programs the same train/ and test/ folders instead.

The network (141k parameters at 10 classes): five 3x3 convolutions with BatchNorm and ReLU,
widths 32, 32, (2x2 max-pool), 64, 64, (2x2 max-pool), 128, then global average pooling and a
linear head.  Training: AdamW (weight decay 5e-4), a one-cycle schedule peaking at 4e-3, label
smoothing 0.1, batch 128, random translations of up to 2 pixels (zeros shifted in; --flip adds
left-right mirroring).  The number of epochs is planned from the pace of the first 30 steps so
that training and the final scoring end within the budget; the first steps count in it.

Prints one line per epoch and then `test accuracy A` (one pass, the final weights), the wall
time, the epochs and the peak RSS, so that it can stand beside `vit_train --data SET --budget`.
"""
import argparse, gzip, os, resource, struct, sys, time

import numpy as np


def parse_budget(text):
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t[-1] in units else float(t)
    except (ValueError, IndexError):
        sys.exit(f"torch_cnn_ref: --budget: expected seconds or a number with s/m/h, got '{text}'")


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(">I", data[:4])[0] & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(spec):
    """(xtr [N,C,H,W] float32 in [0,1], ytr int64, xte, yte)"""
    if spec == "digits":
        here = os.path.dirname(os.path.abspath(__file__))
        rows = np.loadtxt(gzip.open(os.path.join(here, "..", "data", "digits.csv.gz"), "rt"),
                          delimiter=",", dtype=np.int64)
        x = (rows[:, :64].reshape(-1, 1, 8, 8) / 16).astype(np.float32)
        return x[:1437], rows[:1437, 64], x[1437:], rows[1437:, 64]
    if not os.path.isdir(spec):
        sys.exit(f"torch_cnn_ref: {spec}: not 'digits' and not a folder")
    names = sorted(os.listdir(spec))
    if "test_batch.bin" in names:
        def batch(paths):
            rec = np.concatenate([np.fromfile(os.path.join(spec, p), np.uint8).reshape(-1, 3073)
                                  for p in paths])
            return (rec[:, 1:].reshape(-1, 3, 32, 32) / 255).astype(np.float32), rec[:, 0].astype(np.int64)
        train = sorted(n for n in names if n.startswith("data_batch_") and n.endswith(".bin"))
        return (*batch(train), *batch(["test_batch.bin"]))
    idx = [n for n in names if "idx3-ubyte" in n]
    if idx:
        def part(words):
            got = [n for n in names if all(w in n for w in words)]
            if not got:
                sys.exit(f"torch_cnn_ref: {spec}: no file with {words}")
            return read_idx(os.path.join(spec, got[0]))
        test = "t10k" if any("t10k" in n for n in names) else "test"
        xtr, xte = part(["train", "images"]), part([test, "images"])
        f = lambda x: (x[:, None] / 255).astype(np.float32) if x.ndim == 3 else \
            (x.transpose(0, 3, 1, 2) / 255).astype(np.float32)
        return f(xtr), part(["train", "labels"]).astype(np.int64), f(xte), part([test, "labels"]).astype(np.int64)
    if "train" in names and "test" in names:
        from PIL import Image
        classes = sorted(c for c in os.listdir(os.path.join(spec, "train")) if not c.startswith("."))
        def folder(half):
            xs, ys = [], []
            for k, c in enumerate(classes):
                d = os.path.join(spec, half, c)
                for n in sorted(os.listdir(d)):
                    if n.lower().endswith((".png", ".jpg", ".jpeg")):
                        a = np.asarray(Image.open(os.path.join(d, n)))
                        xs.append(a[None] if a.ndim == 2 else a[..., :3].transpose(2, 0, 1))
                        ys.append(k)
            return (np.stack(xs) / 255).astype(np.float32), np.array(ys, np.int64)
        return (*folder("train"), *folder("test"))
    sys.exit(f"torch_cnn_ref: {spec}: neither IDX files, CIFAR batches nor train/ and test/ "
             "folders (a flat folder of classes: split it into train/ and test/ for both programs)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--budget", default="10m")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--flip", action="store_true")
    a = p.parse_args()
    budget = parse_budget(a.budget)
    t0 = time.time()
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr, xte, yte = load(a.data)
    n, c, h, w = xtr.shape
    classes = int(max(ytr.max(), yte.max())) + 1
    xtr, ytr, xte, yte = map(torch.from_numpy, (xtr, ytr, xte, yte))

    def cbr(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]
    pool = lambda: [nn.MaxPool2d(2)] if min(h, w) >= 8 else []
    net = nn.Sequential(*cbr(c, 32), *cbr(32, 32), *pool(), *cbr(32, 64), *cbr(64, 64), *pool(),
                        *cbr(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))
    params = sum(q.numel() for q in net.parameters())
    decay = [q for q in net.parameters() if q.ndim > 1]
    rest = [q for q in net.parameters() if q.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0}],
                            lr=a.lr)
    g = torch.Generator().manual_seed(a.seed)

    def augment(x):
        b = len(x)
        pad = F.pad(x, (2, 2, 2, 2))
        dy = torch.randint(0, 5, (b,), generator=g)
        dx = torch.randint(0, 5, (b,), generator=g)
        rows = (dy[:, None] + torch.arange(h))[:, None, :, None].expand(b, c, h, w + 4)
        x = pad.gather(2, rows)
        cols = (dx[:, None] + torch.arange(w))[:, None, None, :].expand(b, c, h, w)
        x = x.gather(3, cols)
        if a.flip:
            m = torch.rand(b, generator=g) < 0.5
            x[m] = x[m].flip(3)
        return x

    def score():
        net.eval()
        right = 0
        with torch.no_grad():
            for i in range(0, len(xte), 512):
                right += (net(xte[i:i + 512]).argmax(1) == yte[i:i + 512]).sum().item()
        net.train()
        return right / len(xte)

    steps_per_epoch = (n + a.batch - 1) // a.batch
    # The pace: 30 steps at the peak rate's start (they count in the run), and one scoring pass.
    step = 0
    perm = torch.randperm(n, generator=g)
    t_pace = time.time()
    for i in range(30):
        sel = perm[(i * a.batch) % n:][:a.batch]
        loss = F.cross_entropy(net(augment(xtr[sel])), ytr[sel], label_smoothing=0.1)
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    step_s = (time.time() - t_pace) / 30
    t_score = time.time(); score(); score_s = time.time() - t_score
    left = budget - (time.time() - t0) - 1.5 * score_s - 5  # the final scoring and a margin
    # Planned in steps, so that a budget shorter than an epoch is kept too; the last epoch may
    # be cut short.
    total = max(1, int(left / step_s))
    epochs = (total + steps_per_epoch - 1) // steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=total, pct_start=0.25)
    print(f"cnn: {params} parameters, {n} train + {len(xte)} test images of {h}x{w}x{c}, {classes} classes; "
          f"{step_s * 1000:.0f} ms a step -> {total} steps "
          f"({epochs} epochs of {steps_per_epoch}) in {budget:.0f} s", flush=True)
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=g)
        run = 0.0
        for i in range(min(steps_per_epoch, total - step)):
            step += 1
            sel = perm[i * a.batch:(i + 1) * a.batch]
            loss = F.cross_entropy(net(augment(xtr[sel])), ytr[sel], label_smoothing=0.1)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); sched.step()
            run += loss.item()
        print(f"epoch {epoch + 1}/{epochs} loss {run / max(1, i + 1):.4f} {time.time() - t0:.1f} s", flush=True)
    acc = score()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"test accuracy {acc:.4f}")
    print(f"wall {time.time() - t0:.1f} s (budget {budget:.0f} s), {epochs} epochs, peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
