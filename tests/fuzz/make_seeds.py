#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/.

Usage: make_seeds.py VIT_TRAIN   (path of a built vit_train)
       make_seeds.py --only KIND...  (only those corpora: jpeg, cifar, ...)

The JPEG seeds are written with Pillow (Debian python3-pil), the rest with
the standard library alone.

The seeds are small valid inputs of each format (and a few near-misses),
written by hand from the format descriptions in include/vit/*.h, so that a
fuzzer starts from files that reach deep into each parser.  The checkpoint
seeds also include real checkpoints of a tiny run of vit_train.  The output
is deterministic; the files are committed, this script documents how they
were made.  The files with 40-hex-digit names beside them are not written
here: they are what the 10-minute libFuzzer runs added, minimised with
`fuzz_NAME -merge=1 NEW tests/fuzz/corpus/NAME FOUND`.
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(kind, name, data):
    d = os.path.join(CORPUS, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, mtime=0)


# ---- digits CSV -------------------------------------------------------------

def digits():
    with gzip.open(os.path.join(ROOT, "data", "digits.csv.gz"), "rb") as f:
        lines = f.read().splitlines(keepends=True)[:5]
    text = b"".join(lines)
    put("digits_csv", "five_lines.csv", text)
    put("digits_csv", "four_lines.csv.gz", gz(b"".join(lines[:4])))
    put("digits_csv", "crlf_trailing_blank.csv", text.replace(b"\n", b"\r\n") + b"\n\n")
    put("digits_csv", "no_final_newline.csv", text.rstrip(b"\n"))
    put("digits_csv", "spaces.csv", b"\n".join(l.strip().replace(b",", b" ,") for l in lines[:3]) + b"\n")
    put("digits_csv", "label_out_of_range.csv", text.replace(b",0\n", b",10\n", 1))


# ---- IDX --------------------------------------------------------------------

def idx_images(n, rows, cols, seed):
    body = bytes((seed * 37 + i * 11) & 0xFF for i in range(n * rows * cols))
    return struct.pack(">IIII", 0x803, n, rows, cols) + body


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def idx_input(flags, files):
    """The harness's layout: flags, three u16 lengths, four files."""
    head = bytes([flags]) + b"".join(struct.pack("<H", len(f)) for f in files[:3])
    return head + b"".join(files)


def idx():
    tr = [idx_images(4, 3, 2, 1), idx_labels([0, 1, 2, 1]),
          idx_images(2, 3, 2, 2), idx_labels([1, 0])]
    put("idx", "plain", idx_input(0, tr))
    put("idx", "globbed_names", idx_input(1, tr))
    put("idx", "gzip", idx_input(0, [gz(f) for f in tr]))
    put("idx", "one_label_class", idx_input(0, [tr[0], idx_labels([0, 0, 0, 0]), tr[2], idx_labels([0, 0])]))
    put("idx", "size_mismatch", idx_input(0, [tr[0], tr[1], idx_images(2, 2, 3, 2), tr[3]]))
    put("idx", "absurd_header", idx_input(0, [struct.pack(">IIII", 0x803, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF)] + tr[1:]))
    put("idx", "ambiguous", idx_input(3, tr))
    put("idx", "missing_file", idx_input(4, tr))


# ---- PNG --------------------------------------------------------------------

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width, height, depth, color, rows, extra=b""):
    """rows: list of raw row bytes (without the filter byte)."""
    raw = b"".join(b"\x00" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def pngs():
    put("png", "gray8_2x2", png(2, 2, 8, 0, [b"\x00\x55", b"\xaa\xff"]))
    put("png", "gray8_3x5", png(5, 3, 8, 0, [bytes(range(i, i + 5)) for i in range(3)]))
    put("png", "rgb8_2x3", png(3, 2, 8, 2, [bytes(range(9)), bytes(range(9, 18))]))
    put("png", "rgba8_2x2", png(2, 2, 8, 6, [bytes([1, 2, 3, 0, 4, 5, 6, 255])] * 2))
    put("png", "graya8_2x2", png(2, 2, 8, 4, [bytes([7, 0, 8, 128])] * 2))
    put("png", "gray16_2x2", png(2, 2, 16, 0, [b"\x00\x01\xff\xff"] * 2))
    put("png", "rgba16_1x2", png(2, 1, 16, 6, [bytes(range(16))]))
    put("png", "gray1_8x2", png(8, 2, 1, 0, [b"\xa5", b"\x3c"]))
    plte = chunk(b"PLTE", bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]))
    trns = chunk(b"tRNS", bytes([255, 128]))
    put("png", "palette4_2x2", png(2, 2, 4, 3, [b"\x01", b"\x23"], plte + trns))
    put("png", "gray8_gamma", png(2, 2, 8, 0, [b"\x10\x20", b"\x30\x40"], chunk(b"gAMA", struct.pack(">I", 100000))))


# ---- config -----------------------------------------------------------------

def configs():
    with open(os.path.join(ROOT, "models", "digits-tiny.cfg"), "rb") as f:
        put("config", "digits-tiny.cfg", f.read())
    put("config", "small.cfg", b"patch = 2\ndim = 8\ndepth = 1\nheads = 2\nmlp = 8\npool = mean\n")
    put("config", "recipe.cfg", b"lr = 1e-3 # peak\nmin_lr=0\nwarmup = 0.5\nseed = 18446744073709551615\n")
    put("config", "errors.cfg", b"dim = 64\nheads four\n")
    put("config", "range.cfg", b"heads = 3\nsmoothing = 0.99\neps = 1e-30\n")


# ---- checkpoints -----------------------------------------------------------

def ckpt(config, tensors, step=3, epoch=1, rng=(1, 2, 3, 4), real_size=4, version=1,
         epoch_step=0, sums=(0.0, 0.0, 0.0), order=(), class_names=()):
    out = b"VITCKPT1" + struct.pack("<II", version, real_size) + struct.pack("<QQ", step, epoch)
    out += struct.pack("<4Q", *rng)
    if version >= 2:  # the position inside an epoch
        out += struct.pack("<Q3d", epoch_step, *sums) + struct.pack("<I", len(order))
        out += b"".join(struct.pack("<I", k) for k in order)
    out += struct.pack("<I", len(config)) + config
    if version >= 2:  # the class names
        out += struct.pack("<I", len(class_names))
        out += b"".join(struct.pack("<H", len(n)) + n for n in class_names)
    out += struct.pack("<I", len(tensors))
    for name, dims, values in tensors:
        out += struct.pack("<H", len(name)) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += b"".join(struct.pack("<f", v) for v in values)
    return out + struct.pack("<I", zlib.crc32(out))


def checkpoints(vit_train):
    put("checkpoint", "generic", ckpt(b"dim = 2\n", [(b"a", [2], [1.0, -2.5]),
                                                     (b"b.w", [1, 2, 1, 1], [0.5, 3e38])]))
    put("checkpoint", "empty", ckpt(b"", []))
    put("checkpoint", "real8", ckpt(b"x", [(b"t", [1], [0.0])], real_size=8))
    put("checkpoint", "position", ckpt(b"dim = 2\n", [(b"a", [2], [1.0, -2.5])], version=2,
                                       epoch_step=2, sums=(3.5, 2.0, 4.0), order=(2, 0, 3, 1)))
    put("checkpoint", "class_names", ckpt(b"dim = 2\n", [(b"a", [2], [1.0, -2.5])], version=2,
                                          class_names=(b"bag", "\u00e9t\u00e9".encode(), b"x" * 255)))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        imgs = [idx_images(8, 4, 4, 1), idx_labels([0, 1] * 4), idx_images(2, 4, 4, 2), idx_labels([1, 0])]
        for name, body in zip(["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"], imgs):
            with open(os.path.join(data, name), "wb") as f:
                f.write(body)
        for name, flags in [("run_tiny_cls", ["--pool", "cls"]), ("run_tiny_mean", ["--pool", "mean"]),
                            ("run_tiny_split", ["--pool", "cls", "--val-split", "0.25",
                                                "--split-seed", "3"])]:
            out = os.path.join(tmp, name)
            subprocess.run([vit_train, "--data", data, "--out", out, "--quiet", "--threads", "1",
                            "--patch", "2", "--dim", "2", "--heads", "1", "--depth", "1",
                            "--mlp", "2", "--epochs", "1", "--batch", "4"] + flags,
                           check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(out, "last.ckpt"), "rb") as f:
                put("checkpoint", name, f.read())


# ---- safetensors -------------------------------------------------------------

def st_tensors(c):
    """timm's names and shapes (vit/safetensors.h) for config c, in order."""
    D, M, K, P = c["dim"], c["mlp"], c["classes"], c["patch"]
    T = (c["image_height"] // P) * (c["image_width"] // P) + 1
    out = [("cls_token", [1, 1, D]), ("pos_embed", [1, T, D]),
           ("patch_embed.proj.weight", [D, c["channels"], P, P]), ("patch_embed.proj.bias", [D])]
    for l in range(c["depth"]):
        b = f"blocks.{l}."
        out += [(b + "norm1.weight", [D]), (b + "norm1.bias", [D]),
                (b + "attn.qkv.weight", [3 * D, D]), (b + "attn.qkv.bias", [3 * D]),
                (b + "attn.proj.weight", [D, D]), (b + "attn.proj.bias", [D]),
                (b + "norm2.weight", [D]), (b + "norm2.bias", [D]),
                (b + "mlp.fc1.weight", [M, D]), (b + "mlp.fc1.bias", [M]),
                (b + "mlp.fc2.weight", [D, M]), (b + "mlp.fc2.bias", [D])]
    return out + [("norm.weight", [D]), ("norm.bias", [D]), ("head.weight", [K, D]),
                  ("head.bias", [K])]


def st_file(meta, tensors, dtype="F32", reverse=False):
    header = {"__metadata__": meta} if meta is not None else {}
    blobs, offset, i = [], 0, 0
    for name, shape in (reversed(tensors) if reverse else tensors):
        n = 1
        for d in shape:
            n *= d
        raw = b"".join(struct.pack("<f", 0.25 * ((i + k) % 7) - 0.5) for k in range(n))
        i += n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors():
    tiny = {"image_height": 2, "image_width": 2, "channels": 1, "classes": 2, "patch": 1,
            "dim": 2, "depth": 1, "heads": 1, "mlp": 2}
    meta = {k: str(v) for k, v in tiny.items()}
    ours = dict(meta, pool="cls", global_pool="token", layer_norm_eps="1e-05",
                activation="gelu_exact", adamw_eps="1e-08", adamw_beta1="0.9", lr="0.001")
    put("safetensors", "tiny_cls", st_file(ours, st_tensors(tiny)))
    put("safetensors", "tiny_mean_reversed",
        st_file(dict(meta, global_pool="avg"), st_tensors(tiny), reverse=True))
    put("safetensors", "tiny_old_keys",
        st_file(dict(meta, pool="mean", eps="1e-07", beta1="0.8", weight_decay="0"),
                st_tensors(tiny)))
    two = dict(tiny, depth=2, dim=4, heads=2, channels=3, image_width=4, patch=2, classes=3)
    put("safetensors", "two_blocks",
        st_file({k: str(v) for k, v in two.items()} | {"pool": "cls"}, st_tensors(two)))
    put("safetensors", "f16", st_file(dict(meta, pool="cls"), st_tensors(tiny), dtype="F16"))
    put("safetensors", "no_metadata", st_file(None, st_tensors(tiny)))
    put("safetensors", "escapes", st_file(dict(meta, pool="cls", note="\u00e9\U0001f600\"\\\n"),
                                          st_tensors(tiny)))
    put("safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")
    put("safetensors", "truncated", st_file(dict(meta, pool="cls"), st_tensors(tiny))[:-3])
    with open(os.path.join(ROOT, "tests", "data", "torch_vit.safetensors"), "rb") as f:
        put("safetensors", "torch_vit", f.read())


# ---- JPEG -------------------------------------------------------------------

def jpegs():
    import io
    from PIL import Image

    def img(mode, w, h):
        im = Image.new(mode, (w, h))
        bands = len(mode)
        im.putdata([tuple((x * 37 + y * 11 + b * 50) & 0xFF for b in range(bands))
                    if bands > 1 else (x * 37 + y * 11) & 0xFF
                    for y in range(h) for x in range(w)])
        return im

    def jpeg(im, **kw):
        out = io.BytesIO()
        im.save(out, "JPEG", **kw)
        return out.getvalue()

    put("jpeg", "gray_2x2", jpeg(img("L", 2, 2), quality=90))
    put("jpeg", "gray_8x8", jpeg(img("L", 8, 8), quality=75))
    put("jpeg", "rgb_16x8_420", jpeg(img("RGB", 16, 8), quality=75, subsampling=2))
    put("jpeg", "rgb_9x7_444", jpeg(img("RGB", 9, 7), quality=95, subsampling=0))
    put("jpeg", "rgb_8x8_422_optimized", jpeg(img("RGB", 8, 8), quality=50, subsampling=1,
                                              optimize=True))
    put("jpeg", "rgb_16x16_progressive", jpeg(img("RGB", 16, 16), quality=80, progressive=True))
    put("jpeg", "gray_8x8_progressive", jpeg(img("L", 8, 8), quality=80, progressive=True))
    put("jpeg", "cmyk_8x8", jpeg(img("CMYK", 8, 8), quality=80))
    base = jpeg(img("L", 8, 8), quality=75)
    sof = base.index(b"\xff\xc0")
    put("jpeg", "gray_8x8_12bit", base[:sof + 4] + b"\x0c" + base[sof + 5:])
    put("jpeg", "gray_8x8_truncated", base[:len(base) * 2 // 3])


# ---- CIFAR (the harness's own description, see fuzz_cifar.c) -----------------

def cifar_input(flags, files, names=b"", payload=b""):
    return bytes([flags] + files + [0] * (6 - len(files))) + struct.pack("<H", len(names)) + \
        names + payload


def cifars():
    ok10 = bytes(range(10)) * 3  # labels 0..9 whichever the offset
    names10 = b"airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n"
    put("cifar", "c10_one_each", cifar_input(0, [1] * 6, payload=ok10))
    put("cifar", "c10_names", cifar_input(4, [2, 1, 1, 1, 1, 1], names10, ok10))
    put("cifar", "c10_few_names", cifar_input(4, [1] * 6, b"a\nb\n", ok10))
    put("cifar", "c10_cut", cifar_input(0, [1, 1, 1, 1 | 4, 1, 1], payload=ok10))
    put("cifar", "c10_missing", cifar_input(8, [1] * 6, payload=ok10))
    put("cifar", "c10_bad_label", cifar_input(0, [1] * 6, payload=bytes([200])))
    put("cifar", "c100_fine", cifar_input(1, [3, 1], payload=bytes(range(20))))
    put("cifar", "c100_coarse_names", cifar_input(
        1 | 2 | 4, [2, 2], b"".join(b"c%d\n" % k for k in range(20)), bytes(range(20))))
    put("cifar", "c100_names", cifar_input(
        1 | 4, [1, 1], b"".join(b"  f%d \n\n" % k for k in range(100)), bytes(range(20))))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--only":
        for kind in sys.argv[2:]:
            {"digits_csv": digits, "idx": idx, "png": pngs, "jpeg": jpegs, "cifar": cifars,
             "config": configs, "safetensors": safetensors}[kind]()
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    digits()
    idx()
    pngs()
    jpegs()
    cifars()
    configs()
    safetensors()
    checkpoints(sys.argv[1])


if __name__ == "__main__":
    main()
