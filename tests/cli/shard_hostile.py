#!/usr/bin/env python3
"""Hostile .llmk files for `llm-shard verify` (run by tests/cli/shard.sh).

Builds .llmk files with an independent writer (this file, from the llmk(5) spec), checks
that well-formed ones verify (exit 0) and that every malformed family exits 65 with one
line on stderr, never a crash (exit >= 128 or a sanitizer's code).  Prints one line per
family: "PASS name" or "FAIL name: detail".

usage: shard_hostile.py LLM_SHARD SAMPLE TMPDIR
"""
import os
import random
import resource
import struct
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor

SHARD, SAMPLE, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
MAGIC = b"LLMK\0\r\n\x1a"
CAP = 64 << 20
SAN = bool(os.environ.get("LLM_SAN"))
SIZES = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "i32": (4, 1), "u8": (1, 1),
         "u16": (2, 1), "i8": (1, 1), "q8_0": (34, 32), "q4_0": (18, 32)}
results = []


def align(x, a=64):
    return (x + a - 1) // a * a


def limit_memory():
    """Cap the address space of this process and so of every llm-shard it starts (set
    once here rather than in preexec_fn, which would make every spawn a slow fork): a
    reader that trusted a size in the header would blow through it."""
    if not SAN:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run(data, args=("verify",), stdin=False, name="f.llmk"):
    """Run llm-shard on data (bytes) via a file or stdin; returns (rc, stderr)."""
    if stdin:
        p = subprocess.run([SHARD, *args, "-"], input=data, capture_output=True, timeout=60)
    else:
        path = os.path.join(TMP, "%d-%s" % (random.getrandbits(48), name))
        with open(path, "wb") as f:
            f.write(data)
        p = subprocess.run([SHARD, *args, path], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
        os.unlink(path)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def judge(rc, err, allow_ok=False):
    """None when acceptable, else a reason."""
    if rc < 0 or rc >= 128 or rc in (98, 99):
        return "crashed (rc %d): %s" % (rc, err[-300:])
    if rc == 0 and allow_ok:
        return None
    if rc != 65:
        return "exit %d, want 65: %s" % (rc, err[:200])
    lines = err.rstrip("\n").split("\n")
    if len(lines) != 1 or not lines[0].startswith("llm-shard: "):
        return "not one error line: %r" % err[:300]
    return None


def family(name, cases, allow_ok=False, stdin=False, want=None):
    """cases: list of bytes.  All must pass judge(); want: substring of the message."""
    def one(c):
        rc, err = run(c, stdin=stdin)
        why = judge(rc, err, allow_ok)
        if not why and want and rc == 65 and want not in err:
            why = "message lacks %r: %s" % (want, err.strip())
        return why
    with ThreadPoolExecutor(2) as ex:
        bad = [w for w in ex.map(one, cases) if w]
    if bad:
        results.append("FAIL %s: %d of %d cases; first: %s" % (name, len(bad), len(cases), bad[0]))
    else:
        results.append("PASS %s (%d cases)" % (name, len(cases)))


def render(tensors, sections=None):
    out = sections if sections is not None else "model:\n  arch: gpt2\n  n_layer: 1\ntokenizer:\n  kind: byte\n"
    out += "tensors:\n" if tensors else "tensors: []\n"
    for t in tensors:
        first = True
        for k, v in t.items():
            out += ("- " if first else "  ") + "%s: %s\n" % (k, v)
            first = False
    return out


def layout(specs):
    """specs: [(name, dtype, shape, raw, compress)] -> (field dicts, placements)."""
    fields, places, pos = [], [], 0
    for name, dt, shape, raw, comp in specs:
        stored = zlib.compress(raw) if comp else raw
        off = align(pos)
        f = {"name": name, "dtype": dt, "shape": "[%s]" % ", ".join(map(str, shape)), "offset": off,
             "nbytes": len(raw), "stored": len(stored), "crc32": zlib.crc32(stored)}
        if comp:
            f["compression"] = "zlib"
        fields.append(f)
        places.append((off, stored))
        pos = off + len(stored)
    return fields, places


def build(fields, places, version=1, hlen=None, header=None, tail=b"", pad_byte=0, sections=None):
    hb = (header if header is not None else render(fields, sections)).encode()
    H = len(hb) if hlen is None else hlen
    out = bytearray(MAGIC + struct.pack("<IQ", version, H) + hb)
    ds = align(20 + len(hb))
    out += bytes([pad_byte]) * (ds - len(out))
    for off, blob in places:
        end = ds + off
        if len(out) < end:
            out += b"\0" * (end - len(out))
        out[end:end + len(blob)] = blob
    return bytes(out) + tail


def rnd(n, seed):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(n))


def main():
    limit_memory()
    random.seed(1)
    sample = open(SAMPLE, "rb").read()
    hlen = struct.unpack("<Q", sample[12:20])[0]
    dstart = align(20 + hlen)

    # a larger file built here: every dtype, two compressed tensors, > 40 KiB of data
    specs = [("wte", "f32", [64, 64], rnd(64 * 64 * 4, 1), False),
             ("wpe", "f16", [32, 64], bytes(i // 64 % 7 for i in range(32 * 64 * 2)), True),
             ("ln.b", "bf16", [64], rnd(128, 2), False),
             ("ids", "i32", [7], rnd(28, 3), False),
             ("mask", "u8", [5], rnd(5, 4), False),
             ("lens", "u16", [3, 3], rnd(18, 5), True),
             ("d", "i8", [2, 2, 2], rnd(8, 6), False),
             ("q8", "q8_0", [4, 64], rnd(8 * 34, 7), False),
             ("q4", "q4_0", [128], rnd(4 * 18, 8), False),
             ("s", "f32", [], rnd(4, 9), False),
             ("z", "f32", [0, 3], b"", False)]
    F, P = layout(specs)
    big = build(F, P)

    def mut(i, **kw):
        f = [dict(x) for x in F]
        f[i].update(kw)
        return f

    # well-formed files from this independent writer must verify
    good = [big, build([], []), build(F[:1], P[:1], sections="")]
    bad = [(i, run(g)) for i, g in enumerate(good)]
    bad = [(i, r) for i, r in bad if r[0] != 0]
    results.append("PASS independent writer's files verify" if not bad else
                   "FAIL independent writer's files verify: case %d: %s" % (bad[0][0], bad[0][1][1].strip()))
    rc, err = run(big, stdin=True)
    results.append("PASS big file verifies from a pipe" if rc == 0 else "FAIL big file from a pipe: " + err)

    # truncations
    # under sanitizers every run costs ~10x: every STRIDE-th byte there, every byte otherwise
    STRIDE = 3 if SAN else 1
    family("truncated at every byte of the header", [sample[:i] for i in range(0, dstart, STRIDE)])
    family("truncated in the header, read from a pipe", [sample[:i] for i in range(0, dstart, 5 * STRIDE)],
           stdin=True)
    family("truncated at 4 KiB steps through the data",
           [big[:i] for i in range(align(20 + struct.unpack("<Q", big[12:20])[0]), len(big), 4096)] + [big[:-1]])
    family("truncated data, read from a pipe", [big[:i] for i in range(4096, len(big), 4096)], stdin=True)

    # flips: any header byte (may still be a valid file: exit 0 allowed), any data byte
    family("every header byte flipped (xor 0xff)",
           [sample[:i] + bytes([sample[i] ^ 0xFF]) + sample[i + 1:] for i in range(0, dstart, STRIDE)],
           allow_ok=True)
    family("every header byte flipped (xor 0x01)",
           [sample[:i] + bytes([sample[i] ^ 0x01]) + sample[i + 1:] for i in range(0, dstart, 7 if SAN else 1)], allow_ok=True)
    r = random.Random(5)
    bh = align(20 + struct.unpack("<Q", big[12:20])[0])
    pos = sorted(r.sample(range(bh, len(big)), 60 // STRIDE))
    family("random data bytes flipped", [big[:i] + bytes([big[i] ^ (1 << r.randrange(8))]) + big[i + 1:]
                                         for i in pos], want="tensor '")
    family("random data bytes flipped, from a pipe",
           [big[:i] + bytes([big[i] ^ 0x80]) + big[i + 1:] for i in pos[::6]], stdin=True)

    # the fixed prefix
    H = struct.unpack("<Q", sample[12:20])[0]
    pre = lambda v, h: MAGIC + struct.pack("<IQ", v, h)
    family("header length huge or negative",
           [pre(1, h) + sample[20:] for h in (CAP + 1, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 0)])
    family("header length above the cap", [pre(1, CAP + 1) + b"x" * 100], want="cap")
    family("header length above the cap, from a pipe", [pre(1, CAP + 1) + b"x" * 100], stdin=True)
    family("header length within the cap but more than the file", [pre(1, CAP) + sample[20:]], stdin=True)
    family("header length off by one", [pre(1, H + d) + sample[20:] for d in (-1, 1, 7, -7)])
    family("future or zero version", [pre(v, H) + sample[20:] for v in (2, 3, 0xFFFFFFFF, 0)], want="version")
    family("bad magic", [b"GGUF" + sample[4:], b"LLMK\0\n\r\x1a" + sample[8:], b"\0" * 64])
    family("empty and tiny files", [b"", b"L", MAGIC, MAGIC + b"\1\0\0"])

    # sizes, counts, overflow
    family("huge or negative dimensions", [build(mut(0, shape=s), P) for s in
                                           ("[-1, 64]", "[9223372036854775807, 4]", "[99999999999999999999]",
                                            "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "[4294967296, 4294967296, 16]",
                                            "[1.5]", "['64', 64]", "7", "{a: 1}")])
    family("64-bit size overflow", [
        build(mut(0, nbytes=(1 << 64) - 1), P), build(mut(0, nbytes=-16384), P),
        build(mut(0, shape="[4611686018427387904]", nbytes=0), P),
        build(mut(len(F) - 1, offset=(1 << 63) - 64), P),
        build(mut(len(F) - 1, offset=9223372036854775744, stored=9223372036854775807), P),
        build(mut(1, stored=(1 << 62)), P), build(mut(0, crc32=1 << 32), P), build(mut(0, crc32=-1), P)])
    many = "model: {}\ntensors: [" + ", ".join(["{}"] * ((1 << 20) + 1)) + "]\n"
    family("more tensors than the cap", [build([], [], header=many)])
    family("long and empty tensor names", [build(mut(0, name="x" * 300), P), build(mut(0, name="''"), P),
                                           build(mut(0, name='"a\\nb"'), P), build(mut(0, name="~"), P)])
    family("duplicate tensor names", [build(mut(1, name="wte"), P), build(mut(10, name="s"), P)],
           want="duplicate")
    family("empty name", [build(mut(3, name="''"), P)], want="empty")
    family("unknown dtype", [build(mut(0, dtype=d), P) for d in ("f64", "F32", "''", "[f32]", "q8")],
           want="dtype")
    family("shape and nbytes disagree", [build(mut(0, nbytes=64 * 64 * 4 + 1), P),
                                         build(mut(0, shape="[64, 63]"), P),
                                         build(mut(7, shape="[4, 63]"), P),
                                         build(mut(4, dtype="u16"), P)])
    family("stored differs from nbytes without compression", [build(mut(0, stored=100), P)])
    family("missing and unknown tensor keys",
           [build([{k: v for k, v in F[0].items() if k != drop}] + F[1:], P)
            for drop in ("name", "dtype", "shape", "offset", "nbytes", "stored", "crc32")] +
           [build(mut(0, extra=1), P), build(mut(0, compression="gzip"), P)])

    # layout
    family("offsets unaligned", [build(mut(2, offset=F[2]["offset"] + d), P) for d in (1, 8, 32, 63)],
           want="aligned")
    family("offsets overlapping", [build(mut(2, offset=F[2]["offset"] - 64), P), build(mut(1, offset=0), P)],
           want="overlap")
    family("gap between tensors", [build(mut(2, offset=F[2]["offset"] + 64), P)])
    family("offsets out of the file", [build(mut(len(F) - 1, offset=F[-1]["offset"] + 4096), P),
                                       build(mut(len(F) - 2, offset=1 << 40), P)])
    family("trailing bytes", [big + b"\0", big + b"x" * 64, big + b"\0" * 4096], want="trailing")
    family("trailing bytes, from a pipe", [big + b"\0", big + b"x" * 100000], stdin=True)
    gap = [j for j in range(1, len(F)) if F[j]["offset"] > F[j - 1]["offset"] + F[j - 1]["stored"]][0]
    family("nonzero padding", [build(F, P, pad_byte=1),
                               big[:bh + F[gap]["offset"] - 1] + b"\1" + big[bh + F[gap]["offset"]:]],
           want="padding")

    # compression
    def recomp(i, stored):
        f = mut(i, stored=len(stored), crc32=zlib.crc32(stored))
        p = list(P)
        p[i] = (P[i][0], stored)
        # later offsets follow the new size
        pos = P[i][0] + len(stored)
        for j in range(i + 1, len(f)):
            f[j]["offset"] = align(pos)
            p[j] = (align(pos), P[j][1])
            pos = align(pos) + len(P[j][1])
        return build(f, p)
    raw1 = specs[1][3]
    family("bad compressed data with a matching crc", [
        recomp(1, b"not zlib at all"), recomp(1, zlib.compress(raw1)[:-5]),
        recomp(1, zlib.compress(raw1 + b"extra")), recomp(1, zlib.compress(raw1[:-1])),
        recomp(1, zlib.compress(raw1) + b"junk"), recomp(1, b""),
        recomp(1, zlib.compress(b"\0" * (50 << 20)))])
    family("compressed tensor claiming a huge size",
           [build(mut(1, shape="[1099511627776]", nbytes=1 << 41), P)])

    # YAML the header must refuse
    yamls = ["model: &a {x: 1}\nm2: *a\ntensors: []\n", "model: !!map {}\ntensors: []\n",
             "tensors: []\ntensors: []\n", "model: {a: 1, a: 2}\ntensors: []\n",
             "model: {<<: {x: 1}}\ntensors: []\n", "tensors: []\n---\ntensors: []\n",
             "model: " + "[" * 100 + "]" * 100 + "\ntensors: []\n", "- 1\n- 2\n", "just a string\n",
             "model: [1]\ntensors: []\n", "tensors: {}\n", "model: {}\n", "tensors: [1]\n",
             "model: {a: \"\\0\"}\ntensors: []\n", "model: {a: [1, 2}\ntensors: []\n",
             "%TAG !e! tag:e.com,2000:\n---\ntensors: []\n", "model: {x: \xff}\ntensors: []\n",
             "a: &x [1,2]\nb: [*x,*x,*x,*x]\nc: [*b,*b]\ntensors: []\n", "\ttensors: []\n"]
    cases = []
    for y in yamls:
        hb = y.encode("utf-8", "surrogateescape") if "\xff" not in y else y.encode("latin-1")
        out = MAGIC + struct.pack("<IQ", 1, len(hb)) + hb
        cases.append(out + b"\0" * (align(len(out)) - len(out)))
    cases.append(MAGIC + struct.pack("<IQ", 1, 12) + b"tensors: []\0" + b"\0" * 32)
    family("header YAML refused (anchors, tags, duplicates, depth, types, NUL, UTF-8)", cases)

    for r_ in results:
        print(r_)


main()
