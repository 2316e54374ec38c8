#!/usr/bin/python3
"""Writes the committed malformed inputs of tests/test_badinput.sh.

Usage: make_bad.py   (run from anywhere; writes next to this script)

Most malformed files are made by the test itself with printf, head and dd.
The ones here need a valid checksum over altered content (checkpoints) or
a hand-built PNG, which is easier in Python.  The base checkpoint is the
fuzz seed tests/fuzz/corpus/checkpoint/run_tiny_cls: a real vit_train
checkpoint of a 4x4-pixel, 2-class model (patch 2, dim 2, depth 1).
The output is deterministic; the files are committed.
"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "..", "fuzz", "corpus", "checkpoint", "run_tiny_cls")


def put(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


# ---- checkpoints ------------------------------------------------------------

def parse(data):
    """A checkpoint as a dict (see include/vit/checkpoint.h)."""
    assert data[:8] == b"VITCKPT1"
    version, real_size, step, epoch = struct.unpack_from("<IIQQ", data, 8)
    rng = struct.unpack_from("<4Q", data, 32)
    (clen,) = struct.unpack_from("<I", data, 64)
    config = data[68:68 + clen]
    pos = 68 + clen
    (count,) = struct.unpack_from("<I", data, pos)
    pos += 4
    tensors = []
    for _ in range(count):
        (nlen,) = struct.unpack_from("<H", data, pos)
        name = data[pos + 2:pos + 2 + nlen]
        pos += 2 + nlen
        (ndim,) = struct.unpack_from("<I", data, pos)
        dims = list(struct.unpack_from("<%dQ" % ndim, data, pos + 4))
        pos += 4 + 8 * ndim
        n = 1
        for d in dims:
            n *= d
        values = data[pos:pos + 4 * n]
        pos += 4 * n
        tensors.append([name, dims, values])
    assert pos + 4 == len(data)
    return dict(version=version, real_size=real_size, step=step, epoch=epoch, rng=rng,
                config=config, tensors=tensors, count=None)


def build(c):
    out = b"VITCKPT1" + struct.pack("<IIQQ", c["version"], c["real_size"], c["step"], c["epoch"])
    out += struct.pack("<4Q", *c["rng"]) + struct.pack("<I", len(c["config"])) + c["config"]
    count = c["count"] if c["count"] is not None else len(c["tensors"])
    out += struct.pack("<I", count)
    for name, dims, values in c["tensors"]:
        out += struct.pack("<H", len(name)) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + values
    return out + struct.pack("<I", zlib.crc32(out))


def variant(change):
    with open(BASE, "rb") as f:
        c = parse(f.read())
    change(c)
    return build(c)


def checkpoints():
    with open(BASE, "rb") as f:
        put("other_config_4x4.ckpt", f.read())

    def absurd_dims(c):
        c["tensors"][0][1] = [1 << 62] + c["tensors"][0][1][1:]
    put("absurd_dims.ckpt", variant(absurd_dims))

    def absurd_count(c):
        c["count"] = 0xFFFFFFFF
    put("absurd_count.ckpt", variant(absurd_count))

    def huge_config(c):
        c["config"] = b"dim = 65536\ndepth = 1024\nmlp = 1048576\nheads = 1\n"
    put("huge_config.ckpt", variant(huge_config))

    def bad_config(c):
        c["config"] = c["config"].replace(b"dim = 2\n", b"dim = two\n")
    put("bad_config.ckpt", variant(bad_config))

    def nan_value(c):
        name, dims, values = c["tensors"][1]
        c["tensors"][1][2] = struct.pack("<I", 0x7FC00000) + values[4:]
    put("nan_value.ckpt", variant(nan_value))

    def weights_only(c):
        c["tensors"] = [t for t in c["tensors"] if not t[0].startswith(b"adam.")]
    put("weights_only.ckpt", variant(weights_only))

    def wrong_shape(c):
        t = next(t for t in c["tensors"] if len(t[1]) == 2 and t[1][0] != t[1][1])
        t[1] = [t[1][1], t[1][0]]
    put("wrong_shape.ckpt", variant(wrong_shape))

    def missing_tensor(c):
        c["tensors"] = [t for t in c["tensors"] if t[0] != b"head.b"]
    put("missing_tensor.ckpt", variant(missing_tensor))

    def version4(c):  # a version newer than this build reads
        c["version"] = 4
    put("version4.ckpt", variant(version4))

    def duplicate(c):
        c["tensors"][1][0] = c["tensors"][0][0]
    put("duplicate_name.ckpt", variant(duplicate))


# ---- PNG --------------------------------------------------------------------

def chunk(kind, data, crc=None):
    crc = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png(width, height, color, rows, ihdr_crc=None):
    raw = b"".join(b"\x00" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr, ihdr_crc) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def pngs():
    gray = [bytes((16 * r + 40 * c) & 0xFF for c in range(4)) for r in range(4)]
    put("gray4x4.png", png(4, 4, 0, gray))
    put("gray5x5.png", png(5, 5, 0, [bytes(range(r, r + 5)) for r in range(5)]))
    put("rgb4x4.png", png(4, 4, 2, [bytes(range(12))] * 4))
    put("gray8x8.png", png(8, 8, 0, [bytes(range(r, r + 8)) for r in range(8)]))
    put("huge_header.png", png(100000, 100000, 0, [b"\x00" * 4]))
    put("bad_crc.png", png(4, 4, 0, gray, ihdr_crc=0x12345678))


def main():
    checkpoints()
    pngs()


if __name__ == "__main__":
    main()
