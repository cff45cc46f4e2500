#!/usr/bin/python3
"""Reference fixture for llmkit's GPT-2 (tests/unit/test_model.c).

An independent GPT-2 written directly against torch ops and autograd (no nn.Module
from any GPT implementation): token + position embedding, pre-norm blocks (layernorm,
fused qkv projection, causal softmax attention, output projection, residual, layernorm,
4C MLP with tanh GELU, projection, residual), final layernorm, logits = x @ wte^T with a
tied token embedding padded to a multiple of 128 rows, cross-entropy over the first V
columns.  Weights are (out, in): y = x @ W^T + b, the layout of common/model.h.

Writes (little-endian, next to this script unless -o DIR is given):
  gpt2_tiny.json  manifest: config, optimizer hyper-parameters, the parameter views in
                  common/model.h order, and every array's dtype/shape/byte offset
  gpt2_tiny.bin   the arrays: params (flat, in view order), inputs, targets (i32 B*T),
                  logits (B,T,Vp), loss, grads (flat, like params), and for the optimizer
                  test the losses after each of 10 AdamW steps (clipping on) and the
                  gradient norm before each step.

Run with a Python that has torch (Debian: /usr/bin/python3, torch 1.13).  The committed
outputs are what the tests use; regenerate only when the model definition changes.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

L, NH, C, V, MAXT = 2, 4, 64, 500, 32
VP = (V + 127) // 128 * 128
B, T = 2, 16
SEED = 1234
HP = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
STEPS = 10


def views():
    """(name, shape, decay) in common/model.h order."""
    v = [("wte", (VP, C), 1), ("wpe", (MAXT, C), 1)]
    for l in range(L):
        p = "h.%d." % l
        v += [(p + "ln_1.weight", (C,), 0), (p + "ln_1.bias", (C,), 0),
              (p + "attn.c_attn.weight", (3 * C, C), 1), (p + "attn.c_attn.bias", (3 * C,), 0),
              (p + "attn.c_proj.weight", (C, C), 1), (p + "attn.c_proj.bias", (C,), 0),
              (p + "ln_2.weight", (C,), 0), (p + "ln_2.bias", (C,), 0),
              (p + "mlp.c_fc.weight", (4 * C, C), 1), (p + "mlp.c_fc.bias", (4 * C,), 0),
              (p + "mlp.c_proj.weight", (C, 4 * C), 1), (p + "mlp.c_proj.bias", (C,), 0)]
    v += [("ln_f.weight", (C,), 0), ("ln_f.bias", (C,), 0)]
    return v


def make_params(gen):
    """Random parameters.  Biases and layernorm parameters are not left at 0/1 so that
    every gradient path is exercised; padded wte rows are 0 as in the model."""
    ps = {}
    for name, shape, decay in views():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif decay:
            std = 0.02
            if name.endswith("c_proj.weight"):
                std = 0.02 / math.sqrt(2 * L)
            t = std * torch.randn(shape, generator=gen)
        else:
            t = 0.02 * torch.randn(shape, generator=gen)
        if name == "wte":
            t[V:] = 0.0
        ps[name] = t.float().requires_grad_(True)
    return ps


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5) * w + b


def forward(ps, idx, tgt):
    Bn, Tn = idx.shape
    hs = C // NH
    x = ps["wte"][idx] + ps["wpe"][:Tn].unsqueeze(0)
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for l in range(L):
        p = "h.%d." % l
        h = layernorm(x, ps[p + "ln_1.weight"], ps[p + "ln_1.bias"])
        qkv = h @ ps[p + "attn.c_attn.weight"].t() + ps[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(Bn, Tn, NH, hs).transpose(1, 2)
        k = k.view(Bn, Tn, NH, hs).transpose(1, 2)
        v = v.view(Bn, Tn, NH, hs).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.softmax(s, dim=-1)
        y = (a @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + (y @ ps[p + "attn.c_proj.weight"].t() + ps[p + "attn.c_proj.bias"])
        h = layernorm(x, ps[p + "ln_2.weight"], ps[p + "ln_2.bias"])
        h = gelu_tanh(h @ ps[p + "mlp.c_fc.weight"].t() + ps[p + "mlp.c_fc.bias"])
        x = x + (h @ ps[p + "mlp.c_proj.weight"].t() + ps[p + "mlp.c_proj.bias"])
    x = layernorm(x, ps["ln_f.weight"], ps["ln_f.bias"])
    logits = x @ ps["wte"].t()                       # (B,T,Vp); padded columns unused
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1))
    return logits, loss


def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--outdir", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    ps = make_params(gen)
    names = [n for n, _, _ in views()]
    idx = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    tgt = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)

    params0 = flat(ps[n] for n in names).clone()
    logits, loss = forward(ps, idx, tgt)
    loss.backward()
    grads = flat(ps[n].grad for n in names).clone()

    # AdamW, two groups: decay on matmul weights and embeddings only; global-norm clipping.
    decay = [ps[n] for n, _, d in views() if d]
    nodecay = [ps[n] for n, _, d in views() if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["weight_decay"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
                            foreach=False)
    losses, norms = [], []
    for step in range(STEPS):
        if step > 0:
            opt.zero_grad(set_to_none=True)
            _, l = forward(ps, idx, tgt)
            l.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ps.values()))
        norms.append(float(norm))
        # clip_grad_norm_ divides by (norm + 1e-6); do it exactly as llmkit does instead.
        if HP["grad_clip"] > 0 and norm > HP["grad_clip"]:
            for p in ps.values():
                p.grad.mul_(float(HP["grad_clip"] / norm))
        opt.step()
        with torch.no_grad():
            _, l = forward(ps, idx, tgt)
        losses.append(float(l))

    arrays = [
        ("params", params0.float().numpy(), "f32"),
        ("inputs", idx.to(torch.int32).numpy(), "i32"),
        ("targets", tgt.to(torch.int32).numpy(), "i32"),
        ("logits", logits.detach().float().numpy(), "f32"),
        ("loss", torch.tensor([float(loss)], dtype=torch.float32).numpy(), "f32"),
        ("grads", grads.float().numpy(), "f32"),
        ("adamw_losses", torch.tensor(losses, dtype=torch.float32).numpy(), "f32"),
        ("adamw_grad_norms", torch.tensor(norms, dtype=torch.float32).numpy(), "f32"),
    ]
    man = {"generator": "tests/ref/gen_gpt2_ref.py", "torch": torch.__version__,
           "config": {"arch": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "vocab_size": V,
                      "padded_vocab_size": VP, "max_seq_len": MAXT},
           "B": B, "T": T, "adamw": dict(HP, steps=STEPS),
           "views": [], "arrays": {}}
    off = 0
    for n, shape, d in views():
        cnt = int(math.prod(shape))
        man["views"].append({"name": n, "shape": list(shape), "offset": off, "decay": d})
        off += cnt
    blob = bytearray()
    for name, arr, dt in arrays:
        arr = arr.astype("<f4" if dt == "f32" else "<i4")
        man["arrays"][name] = {"dtype": dt, "shape": list(arr.shape), "offset": len(blob),
                               "nbytes": arr.nbytes}
        blob += arr.tobytes()
    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "gpt2_tiny.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(args.outdir, "gpt2_tiny.json"), "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")
    print("loss %.6f  grad norms %s" % (float(loss), " ".join("%.4f" % x for x in norms)),
          file=sys.stderr)
    print("losses after each step %s" % " ".join("%.6f" % x for x in losses), file=sys.stderr)


if __name__ == "__main__":
    main()
