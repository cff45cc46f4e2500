#!/usr/bin/python3
"""Reference fixture for the mixed-precision casts (tests/unit/test_mixed.c).

PyTorch rounds float32 values to bfloat16 (.to(torch.bfloat16)) and to IEEE half
(.half()); the test compares llmkit's cast_lo (both CPU backends) with these bits,
bit for bit (for NaN inputs only NaN-ness: torch's NaN payloads differ by code path).

Inputs: hand-picked edges (ties to even, the f16 overflow boundary at 65520, the bf16
overflow boundary, f16 subnormals and their ties, float subnormals, +-0, +-inf, NaNs),
then uniformly random bit patterns, then random values at every scale from 2^-30 to
2^20.

Writes lo_cast.bin (little-endian) next to this script unless -o DIR is given:
  8 bytes  magic "LLMLOCST"
  u32      n
  n x u32  the float32 inputs (bits)
  n x u16  torch bfloat16 bits
  n x u16  torch float16 bits

Run with a Python that has torch (Debian: /usr/bin/python3, torch 1.13).  The committed
output is what the test uses.
"""
import argparse
import os
import struct

import torch

SEED = 20240805
N_RANDOM_BITS = 3000
N_RANDOM_SCALED = 3000


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def edges():
    v = []
    for x in [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 65536.0, 1e10,
              float("inf"), float("-inf"), 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26,
              1.5 * 2.0 ** -25, 3.0 * 2.0 ** -25, 2049.0, 2051.0, 1.0 + 2.0 ** -11,
              1.0 + 3.0 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3.0 * 2.0 ** -8, 3.0e38]:
        v.append(f32_bits(x))
    v += [0x477fefff, 0x477ff000, 0x477ff001, 0xc77fefff, 0xc77ff000,  # f16 overflow edge
          0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000,               # bf16 overflow edge
          0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff,               # bf16 ties
          0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x80000001,   # float subnormals
          0x387fffff, 0x387fe000, 0x387ff000, 0x33000000, 0x33000001,   # f16 subnormal edges
          0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff]   # NaNs
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    g = torch.Generator().manual_seed(SEED)
    bits = edges()
    rb = torch.randint(0, 2 ** 32, (N_RANDOM_BITS,), generator=g, dtype=torch.int64)
    bits += [int(b) for b in rb]
    scale = torch.pow(2.0, torch.randint(-30, 21, (N_RANDOM_SCALED,), generator=g).double())
    vals = (torch.randn(N_RANDOM_SCALED, generator=g, dtype=torch.float64) * scale).float()
    bits += [f32_bits(float(x)) for x in vals]
    x = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits],
                     dtype=torch.int32).view(torch.float32)
    bf = x.to(torch.bfloat16).view(torch.int16).tolist()
    hf = x.half().view(torch.int16).tolist()
    n = len(bits)
    with open(os.path.join(a.o, "lo_cast.bin"), "wb") as f:
        f.write(b"LLMLOCST")
        f.write(struct.pack("<I", n))
        f.write(struct.pack("<%dI" % n, *bits))
        f.write(struct.pack("<%dH" % n, *[b & 0xFFFF for b in bf]))
        f.write(struct.pack("<%dH" % n, *[h & 0xFFFF for h in hf]))
    print("wrote %d values" % n)


if __name__ == "__main__":
    main()
