#!/usr/bin/python3
"""Writes the committed malformed inputs of tests/test_badinput.sh.

Usage: make_bad.py   (run from anywhere; writes next to this script)

Most malformed files are made by the test itself with printf, head and dd.
The ones here need a valid checksum over altered content (checkpoints) or
a hand-built PNG, which is easier in Python.  Only the standard library is
used; the tests never run this script, they use the committed files.

The base checkpoint is other_config_4x4.ckpt, committed beside this script
and read, not written: a real vit_train checkpoint of a 4x4-pixel, 2-class
model (patch 2, dim 2, depth 1) in format 1.  It is the fuzz seed
tests/fuzz/corpus/checkpoint/run_tiny_cls as it was when these files were
first made; that seed has since been rewritten in format 2 by a newer
vit_train (other weights, other config text), so deriving from it would
change every fixture.  The tests read these files through the format-1
path of the reader, which the current reader keeps (include/vit/checkpoint.h).

The checkpoint code below reads and writes every format this project has
had, 1 to VIT_CKPT_VERSION (taken from include/vit/checkpoint.h), keeping
each file in the layout of its base, so another base can be used.  The
"version newer than this build reads" file is versionN.ckpt for N =
VIT_CKPT_VERSION + 1 (version6.ckpt while the format is 5); after a format
change the test's row names the new file, and the old one is for git rm.

The output is deterministic: run on the committed base, every file comes
out byte-identical to the committed one (checked with git diff).  Each file
is written to a temporary name and renamed, so none is ever half-written.
"""
import os
import re
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "other_config_4x4.ckpt")
HEADER = os.path.join(HERE, "..", "..", "..", "include", "vit", "checkpoint.h")
MAGIC = b"VITCKPT1"


def put(name, data):
    path = os.path.join(HERE, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def format_version():
    """VIT_CKPT_VERSION, the format the library writes."""
    with open(HEADER, encoding="utf-8") as f:
        m = re.search(r"^#define VIT_CKPT_VERSION (\d+)", f.read(), re.M)
    assert m, "%s: no VIT_CKPT_VERSION" % HEADER
    return int(m.group(1))


# ---- checkpoints ------------------------------------------------------------

class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def one(self, fmt):
        return self.take(fmt)[0]

    def raw(self, n):
        b = self.data[self.pos:self.pos + n]
        assert len(b) == n, "truncated at byte %d" % self.pos
        self.pos += n
        return b


def parse(data):
    """A checkpoint of any format 1 .. VIT_CKPT_VERSION as a dict (layout:
    include/vit/checkpoint.h).  Formats 2 and later add the position inside
    an epoch and the class names, format 5 the data record; the tensor
    records are the same in all."""
    assert data[:8] == MAGIC, "not a vit checkpoint"
    assert zlib.crc32(data[:-4]) == struct.unpack("<I", data[-4:])[0], "checksum mismatch"
    r = Reader(data)
    r.pos = 8
    version, real_size, step, epoch = r.take("IIQQ")
    assert 1 <= version <= format_version(), "format version %d" % version
    # layout: 1; 2 for formats 2 to 4, which share it; 3 from format 5
    c = dict(version=version, layout=1 if version == 1 else 2 if version < 5 else 3,
             real_size=real_size, step=step, epoch=epoch, rng=r.take("4Q"), epoch_step=0,
             sums=(0, 0, 0), order=[], class_names=[], data=b"", count=None)
    if c["layout"] >= 2:
        c["epoch_step"] = r.one("Q")
        c["sums"] = r.take("3Q")  # f64 bit patterns, kept as they are
        c["order"] = list(r.take("%dI" % r.one("I")))
    c["config"] = r.raw(r.one("I"))
    if c["layout"] >= 2:
        c["class_names"] = [r.raw(r.one("H")) for _ in range(r.one("I"))]
    if c["layout"] >= 3:
        c["data"] = r.raw(r.one("I"))
    tensors = []
    for _ in range(r.one("I")):
        name = r.raw(r.one("H"))
        dims = list(r.take("%dQ" % r.one("I")))
        n = 1
        for d in dims:
            n *= d
        tensors.append([name, dims, r.raw(4 * n)])
    c["tensors"] = tensors
    assert r.pos + 4 == len(data), "bytes after the last tensor"
    return c


def build(c):
    """The bytes of checkpoint c: the layout of c["layout"] under the
    version number c["version"], which need not match (a file claiming a
    newer version is made by changing the number alone).  c["count"], when
    not None, is written as the tensor count instead of the true one."""
    layout = c["layout"]
    out = MAGIC + struct.pack("<IIQQ", c["version"], c["real_size"], c["step"], c["epoch"])
    out += struct.pack("<4Q", *c["rng"])
    if layout >= 2:
        out += struct.pack("<Q3QI", c["epoch_step"], *c["sums"], len(c["order"]))
        out += b"".join(struct.pack("<I", v) for v in c["order"])
    out += struct.pack("<I", len(c["config"])) + c["config"]
    if layout >= 2:
        out += struct.pack("<I", len(c["class_names"]))
        out += b"".join(struct.pack("<H", len(n)) + n for n in c["class_names"])
    if layout >= 3:
        out += struct.pack("<I", len(c["data"])) + c["data"]
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
        base = f.read()
    assert build(parse(base)) == base, "%s: does not read back to its own bytes" % BASE

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
        assert b"dim = 2\n" in c["config"]
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

    newer = format_version() + 1

    def newer_version(c):  # a version newer than this build reads, else the base
        c["version"] = newer
    put("version%d.ckpt" % newer, variant(newer_version))

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
