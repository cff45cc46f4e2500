#!/usr/bin/env bash
# llm-shard export --to gguf|safetensors and convert --from safetensors, checked from
# outside: the files are parsed by independent Python readers, the model is rebuilt from
# their tensors with PyTorch (float64) and its perplexity compared with llm-infer --eval
# of the .llmk; tokenizer files compared with GPT-2's own; HF -> llmk exact; hostile
# safetensors refused with exit 65.
. "$(dirname "$0")/lib.sh"
UNITDIR=${UNITDIR:-$ROOT/build/tests}
TPY=/usr/bin/python3
if [ ! -x "$UNITDIR/test_gguf" ]; then skip "interop" "no $UNITDIR/test_gguf (make units)"; exit 0; fi
M=$TMP/m.llmk
LLM_WRITE_FIXTURE=$M "$UNITDIR/test_gguf" >/dev/null 2>&1
check "fixture written" test -s "$M"
python3 - "$TMP/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(3); ids = [r.randrange(257) for _ in range(300)]
h = [0] * 256; h[:3] = [20240520, 1, len(ids)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))
PY
nll() { llm-infer "$1" --eval "$TMP/tok.bin" --ctx 64 --stride 64 -t 1 2>/dev/null | python3 -c "import json,sys; print(repr(json.load(sys.stdin)['nll']))"; }
base=$(nll "$M")
check "llm-infer --eval of the fixture" test -n "$base"

expect_exit "export --to gguf" 0 llm-shard export --to gguf "$M" -o "$TMP/m.gguf"
expect_exit "export --to safetensors" 0 llm-shard export --to safetensors "$M" -o "$TMP/hf/"
check "model.safetensors, config.json, vocab.json, merges.txt" test -s "$TMP/hf/model.safetensors" -a -s "$TMP/hf/config.json" -a -s "$TMP/hf/vocab.json" -a -f "$TMP/hf/merges.txt"

# independent readers + a float64 GPT-2 in PyTorch
cat >"$TMP/ref.py" <<'PY'
import json, struct, sys, math
import numpy as np

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n
    spans = sorted(tuple(v["data_offsets"]) for k, v in h.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == c[0] for a, c in zip(spans, spans[1:])) and base + spans[-1][1] == len(b)
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        assert v["dtype"] == "F32", v
        a, e = v["data_offsets"]
        out[k] = np.frombuffer(b[base + a:base + e], dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return out

def from_hf(d):
    cfg = json.load(open(d + "/config.json"))
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["activation_function"] == "gelu_new"
    assert cfg["layer_norm_epsilon"] == 1e-5 and cfg["n_positions"] == cfg["n_ctx"]
    t = read_st(d + "/model.safetensors")
    L, C, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
    assert len(t) == 4 + 12 * L, sorted(t)
    W = {"wte": t["transformer.wte.weight"], "wpe": t["transformer.wpe.weight"],
         "lnfw": t["transformer.ln_f.weight"], "lnfb": t["transformer.ln_f.bias"], "layers": []}
    assert W["wte"].shape == (V, C) and W["wpe"].shape == (cfg["n_positions"], C)
    for l in range(L):
        p = "transformer.h.%d." % l
        g = lambda s: t[p + s]
        assert g("attn.c_attn.weight").shape == (C, 3 * C) and g("mlp.c_proj.weight").shape == (4 * C, C)
        W["layers"].append(dict(ln1w=g("ln_1.weight"), ln1b=g("ln_1.bias"), qkvw=g("attn.c_attn.weight").T,
            qkvb=g("attn.c_attn.bias"), pw=g("attn.c_proj.weight").T, pb=g("attn.c_proj.bias"),
            ln2w=g("ln_2.weight"), ln2b=g("ln_2.bias"), fcw=g("mlp.c_fc.weight").T, fcb=g("mlp.c_fc.bias"),
            fpw=g("mlp.c_proj.weight").T, fpb=g("mlp.c_proj.bias")))
    return W, cfg["n_head"]

def read_gguf(path):
    b = open(path, "rb").read(); at = [0]
    def rd(fmt):
        v = struct.unpack_from("<" + fmt, b, at[0]); at[0] += struct.calcsize("<" + fmt); return v[0]
    def s():
        n = rd("Q"); v = b[at[0]:at[0] + n].decode("utf-8"); at[0] += n; return v
    F = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = rd("I"); n = rd("Q"); return [val(et) for _ in range(n)]
        return rd(F[t])
    assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3
    at[0] = 8; nt = rd("Q"); nkv = rd("Q")
    kv = {}
    for _ in range(nkv):
        k = s(); t = rd("I"); kv[k] = (t, val(t))
    infos = []
    for _ in range(nt):
        name = s(); nd = rd("I"); ne = [rd("Q") for _ in range(nd)]; typ = rd("I"); off = rd("Q")
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", (4, 32))[1]
    base = (at[0] + align - 1) // align * align
    assert all(x == 0 for x in b[at[0]:base])
    T = {}
    ends = []
    for name, ne, typ, off in infos:
        assert typ == 0 and off % align == 0, (name, typ, off)
        n = int(np.prod(ne)); ends.append((off, off + 4 * n))
        assert base + off + 4 * n <= len(b)
        T[name] = np.frombuffer(b[base + off:base + off + 4 * n], dtype="<f4").reshape(list(reversed(ne))).astype(np.float64)
    ends.sort(); assert all(a[1] <= c[0] for a, c in zip(ends, ends[1:])) and len(T) == len(infos)
    return kv, T

def from_gguf(path):
    kv, t = read_gguf(path)
    g = lambda k: kv[k][1]
    assert g("general.architecture") == "gpt2" and g("tokenizer.ggml.model") == "gpt2"
    L, C, H = g("gpt2.block_count"), g("gpt2.embedding_length"), g("gpt2.attention.head_count")
    assert g("gpt2.feed_forward_length") == 4 * C and abs(g("gpt2.attention.layer_norm_epsilon") - 1e-5) < 1e-12
    assert kv["gpt2.context_length"][0] == 4 and g("gpt2.context_length") == t["position_embd.weight"].shape[0]
    V = len(g("tokenizer.ggml.tokens")); assert len(g("tokenizer.ggml.token_type")) == V
    assert t["token_embd.weight"].shape == (V, C) and (t["output.weight"] == t["token_embd.weight"]).all()
    assert len(t) == 5 + 12 * L and len(t) == len(set(t))
    W = {"wte": t["token_embd.weight"], "wpe": t["position_embd.weight"], "lnfw": t["output_norm.weight"],
         "lnfb": t["output_norm.bias"], "layers": []}
    for l in range(L):
        q = lambda s: t["blk.%d.%s" % (l, s)]
        assert q("attn_qkv.weight").shape == (3 * C, C) and q("ffn_down.weight").shape == (C, 4 * C)
        W["layers"].append(dict(ln1w=q("attn_norm.weight"), ln1b=q("attn_norm.bias"), qkvw=q("attn_qkv.weight"),
            qkvb=q("attn_qkv.bias"), pw=q("attn_output.weight"), pb=q("attn_output.bias"),
            ln2w=q("ffn_norm.weight"), ln2b=q("ffn_norm.bias"), fcw=q("ffn_up.weight"), fcb=q("ffn_up.bias"),
            fpw=q("ffn_down.weight"), fpb=q("ffn_down.bias")))
    return W, H

def nll(W, H, ids, ctx):
    import torch
    D = torch.float64
    P = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(D)
    ln = lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), P(w), P(b), 1e-5)
    tot, cnt, last = 0.0, 0, len(ids) - 1
    for b0 in range(0, last, ctx):
        n = min(ctx, last - b0)
        x_ids = torch.tensor(ids[b0:b0 + n]); y = torch.tensor(ids[b0 + 1:b0 + n + 1])
        x = P(W["wte"])[x_ids] + P(W["wpe"])[:n]
        C = x.shape[1]; hs = C // H
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        for p in W["layers"]:
            h = ln(x, p["ln1w"], p["ln1b"]) @ P(p["qkvw"]).T + P(p["qkvb"])
            q, k, v = [z.reshape(n, H, hs).transpose(0, 1) for z in h.split(C, dim=1)]
            a = (q @ k.transpose(1, 2)) / math.sqrt(hs)
            a = a.masked_fill(mask, float("-inf")).softmax(-1)
            x = x + (a @ v).transpose(0, 1).reshape(n, C) @ P(p["pw"]).T + P(p["pb"])
            u = ln(x, p["ln2w"], p["ln2b"]) @ P(p["fcw"]).T + P(p["fcb"])
            u = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
            x = x + u @ P(p["fpw"]).T + P(p["fpb"])
        lg = ln(x, W["lnfw"], W["lnfb"]) @ P(W["wte"]).T
        tot += float((torch.logsumexp(lg, 1) - lg[torch.arange(n), y]).sum()); cnt += n
    return tot / cnt

if __name__ == "__main__":
    kind, path, tok, want = sys.argv[1:5]
    W, H = from_hf(path) if kind == "hf" else from_gguf(path)
    b = open(tok, "rb").read(); ids = [int(v) for v in np.frombuffer(b[1024:], dtype="<u2")]
    got = nll(W, H, ids, 64)
    rel = abs(got - float(want)) / abs(float(want))
    print("%s: torch nll %.9f, llm-infer %s, rel %.2e" % (kind, got, want, rel))
    sys.exit(0 if rel < 2e-5 else 1)
PY
if "$TPY" -c "import torch, numpy" 2>/dev/null && [ -n "$base" ]; then
  check "safetensors: PyTorch GPT-2 from the HF tensors = llm-infer --eval" "$TPY" "$TMP/ref.py" hf "$TMP/hf" "$TMP/tok.bin" "$base"
  check "gguf: PyTorch GPT-2 from the GGUF tensors = llm-infer --eval" "$TPY" "$TMP/ref.py" gguf "$TMP/m.gguf" "$TMP/tok.bin" "$base"
else
  skip "safetensors PyTorch check" "no torch at $TPY"; skip "gguf PyTorch check" "no torch at $TPY"
fi

# llama.cpp's own GGUF reader (gguf-py), when installed: names in its GPT-2 tensor list,
# and its HF -> GGUF name map gives our names
GPY=""
for p in "$TPY" python3; do if "$p" -c "import gguf, numpy" 2>/dev/null; then GPY=$p; break; fi; done
if [ -n "$GPY" ]; then
  check "gguf-py reads the export; names and HF mapping agree" "$GPY" - "$TMP/m.gguf" "$TMP/hf/model.safetensors" <<'PY'
import json, re, struct, sys
from gguf import GGUFReader, MODEL_ARCH, MODEL_TENSORS, TensorNameMap
from gguf.constants import TENSOR_NAMES
r = GGUFReader(sys.argv[1]); names = [t.name for t in r.tensors]
allowed = {TENSOR_NAMES[t] for t in MODEL_TENSORS[MODEL_ARCH.GPT2]}
assert all(re.sub(r"blk\.\d+\.", "blk.{bid}.", n.rsplit(".", 1)[0]) in allowed for n in names), names
assert r.fields["general.architecture"].contents() == "gpt2"
b = open(sys.argv[2], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
L = r.fields["gpt2.block_count"].contents(); tm = TensorNameMap(MODEL_ARCH.GPT2, L)
for k in json.loads(b[8:8 + n]):
    if k != "__metadata__":
        assert tm.get_name(k, try_suffixes=(".weight", ".bias")) in names, k
PY
else
  skip "gguf-py check" "python module gguf not installed"
fi

# HF -> llmk: exact, and the same perplexity
expect_exit "convert --from safetensors" 0 llm-shard convert --from safetensors "$TMP/hf" -o "$TMP/back.llmk"
tensors() { llm-shard info --json "$1" | python3 -c "import json,sys; print(sorted((t['name'],t['dtype'],t['shape'],t['crc32']) for t in json.load(sys.stdin)['tensors']))"; }
check "llmk -> safetensors -> llmk: every tensor bit-identical" test "$(tensors "$M")" = "$(tensors "$TMP/back.llmk")"
check "the imported model evaluates the same" test "$(nll "$TMP/back.llmk")" = "$base"

# an f16 Hugging Face model (every tensor F16, as many are published) imports as f16 and
# runs: llm-infer widens its f16 layer norms, biases and wpe to f32 at load
mkdir -p "$TMP/hf16" && cp "$TMP/hf/config.json" "$TMP/hf/vocab.json" "$TMP/hf/merges.txt" "$TMP/hf16/"
python3 - "$TMP/hf/model.safetensors" "$TMP/hf16/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); base = 8 + n
out, data, at = {"__metadata__": h["__metadata__"]}, b"", 0
for k, v in h.items():
    if k == "__metadata__": continue
    a, e = v["data_offsets"]; f = struct.unpack("<%df" % ((e - a) // 4), b[base + a:base + e])
    x = struct.pack("<%de" % len(f), *f); out[k] = {"dtype": "F16", "shape": v["shape"], "data_offsets": [at, at + len(x)]}
    data += x; at += len(x)
j = json.dumps(out).encode(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
expect_exit "convert --from safetensors of an all-F16 model" 0 llm-shard convert --from safetensors "$TMP/hf16" -o "$TMP/h16.llmk"
check "... every tensor f16" sh -c "llm-shard info --json '$TMP/h16.llmk' | python3 -c \"import json,sys; d=[t['dtype'] for t in json.load(sys.stdin)['tensors'] if not t['name'].startswith('tokenizer')]; assert set(d) == {'f16'}, d\""
h16=$(nll "$TMP/h16.llmk")
check "... llm-infer --eval runs it, nll within 1e-3 of the f32 model's" python3 -c "a, b = $base, ${h16:-0}; assert abs(a - b) < 1e-3 * a, (a, b)"

# GPT-2 tokenizer files equal GPT-2's own
if have_data gpt2/encoder.json && have_data gpt2/vocab.bpe; then
  LLM_WRITE_FIXTURE=$TMP/g.llmk LLM_FIXTURE_GPT2=$DATA/gpt2 "$UNITDIR/test_gguf" >/dev/null 2>&1
  llm-shard export --to safetensors "$TMP/g.llmk" -o "$TMP/ghf" 2>"$TMP/err" && llm-shard export --to gguf "$TMP/g.llmk" -o "$TMP/g.gguf" 2>>"$TMP/err"
  check "gpt2 tokenizer: vocab.json = encoder.json, merges.txt = vocab.bpe, GGUF tokens and merges" python3 - "$TMP/ghf" "$DATA/gpt2" "$TMP/g.gguf" "$TMP/ref.py" <<'PY'
import json, sys, importlib.util
d, g, gg, ref = sys.argv[1:5]
assert json.load(open(d + "/vocab.json")) == json.load(open(g + "/encoder.json"))
ml = lambda p: [l for l in open(p, encoding="utf-8").read().split("\n") if l and not l.startswith("#version")]
assert ml(d + "/merges.txt") == ml(g + "/vocab.bpe")
spec = importlib.util.spec_from_file_location("ref", ref)
# the GGUF reader needs numpy only for tensors: read the key/values by hand here
import struct
b = open(gg, "rb").read(); at = 24
def rd(f):
    global at; v = struct.unpack_from("<" + f, b, at)[0]; at += struct.calcsize("<" + f); return v
def s():
    global at; n = rd("Q"); v = b[at:at + n].decode(); at += n; return v
F = {4: "I", 5: "i", 6: "f"}
def val(t):
    if t == 8: return s()
    if t == 9:
        et = rd("I"); n = rd("Q"); return [val(et) for _ in range(n)]
    return rd(F[t])
kv = {}
for _ in range(struct.unpack_from("<Q", b, 16)[0]):
    k = s(); kv[k] = val(rd("I"))
enc = json.load(open(g + "/encoder.json")); inv = sorted(enc, key=enc.get)
assert kv["tokenizer.ggml.tokens"] == inv
assert kv["tokenizer.ggml.merges"] == ml(g + "/vocab.bpe")
assert kv["tokenizer.ggml.eos_token_id"] == 50256 and kv["tokenizer.ggml.token_type"][50256] == 3
assert kv["tokenizer.ggml.pre"] == "gpt-2"
PY
  expect_exit "gpt2 HF directory imports" 0 llm-shard convert --from safetensors "$TMP/ghf" -o "$TMP/g2.llmk"
  check "gpt2: tokenizer tensors and weights bit-identical after the round trip" test "$(tensors "$TMP/g.llmk")" = "$(tensors "$TMP/g2.llmk")"
  rm -f "$TMP/ghf/vocab.json" "$TMP/ghf/merges.txt"
  python3 - "$DATA/gpt2" "$TMP/ghf/tokenizer.json" <<'PY'
import json, sys
g = sys.argv[1]
m = [l for l in open(g + "/vocab.bpe", encoding="utf-8").read().split("\n") if l and not l.startswith("#version")]
json.dump({"model": {"type": "BPE", "vocab": json.load(open(g + "/encoder.json")), "merges": [x.split(" ") for x in m]}},
          open(sys.argv[2], "w"))
PY
  expect_exit "gpt2 from tokenizer.json (merges as pairs)" 0 llm-shard convert --from safetensors "$TMP/ghf" -o "$TMP/g3.llmk"
  check "tokenizer.json gives the same tokenizer" test "$(tensors "$TMP/g.llmk")" = "$(tensors "$TMP/g3.llmk")"
else
  skip "gpt2 tokenizer files" "no $DATA/gpt2"
fi

# hostile and inconsistent inputs: exit 65 (never a crash), 66 for a missing directory
bad() { # NAME: writes $TMP/bad/model.safetensors from python code on stdin
  rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp "$TMP/hf/config.json" "$TMP/bad/"
  python3 - "$TMP/hf/model.safetensors" "$TMP/bad/model.safetensors"
  expect_exit "refused with 65: $1" 65 llm-shard convert --from safetensors "$TMP/bad" -o "$TMP/x.llmk"
}
bad "truncated" <<'PY'
import sys; b = open(sys.argv[1], "rb").read(); open(sys.argv[2], "wb").write(b[:len(b) - 5])
PY
bad "header length past the end" <<'PY'
import sys, struct; b = open(sys.argv[1], "rb").read(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(b)) + b[8:])
PY
bad "header length 2^63" <<'PY'
import sys, struct; b = open(sys.argv[1], "rb").read(); open(sys.argv[2], "wb").write(struct.pack("<Q", 1 << 63) + b[8:])
PY
bad "broken JSON" <<'PY'
import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[9] = ord("]"); open(sys.argv[2], "wb").write(b)
PY
bad "offsets beyond the data" <<'PY'
import sys, json, struct
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["transformer.ln_f.bias"]["data_offsets"][1] += 1 << 40
j = json.dumps(h).encode(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
bad "shape and bytes disagree" <<'PY'
import sys, json, struct
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["transformer.wpe.weight"]["shape"][0] += 1
j = json.dumps(h).encode(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
bad "a tensor missing" <<'PY'
import sys, json, struct
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1]); e = h[last]["data_offsets"]
del h[last]; j = json.dumps(h).encode(); open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:8 + n + e[0]])
PY
rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp "$TMP/hf/model.safetensors" "$TMP/bad/"
sed 's/gelu_new/relu/' "$TMP/hf/config.json" >"$TMP/bad/config.json"
expect_exit "refused with 65: activation relu" 65 llm-shard convert --from safetensors "$TMP/bad" -o "$TMP/x.llmk"
expect_exit "missing directory: 66" 66 llm-shard convert --from safetensors "$TMP/nothing" -o "$TMP/x.llmk"
check "no partial output" test ! -e "$TMP/x.llmk"
# a refused export makes no directory; a missing one (and its parents) is made
llm-quantize -q "$M" "$TMP/q8.llmk" --type q8_0
expect_exit "export --to safetensors of a q8_0 model: 65" 65 llm-shard export --to safetensors "$TMP/q8.llmk" -o "$TMP/qhf"
check "... no directory made" test ! -e "$TMP/qhf"
expect_exit "export --to safetensors into missing parents" 0 llm-shard export --to safetensors "$M" -o "$TMP/deep/er/hf"
check "... made, the model in it" test -s "$TMP/deep/er/hf/model.safetensors"
check "config.json of an f32 model: torch_dtype float32" grep -q '"torch_dtype": "float32"' "$TMP/deep/er/hf/config.json"
llm-quantize -q "$M" "$TMP/b16.llmk" --type bf16
expect_exit "export --to safetensors of a bf16 model" 0 llm-shard export --to safetensors "$TMP/b16.llmk" -o "$TMP/b16hf"
check "... its config.json says torch_dtype bfloat16" grep -q '"torch_dtype": "bfloat16"' "$TMP/b16hf/config.json"
expect_exit "export --to onnx: 64" 64 llm-shard export --to onnx "$M" -o "$TMP/x"
expect_exit "export of a shard: 65" 65 sh -c "llm-shard split --pp 2 '$M' -o '$TMP/p' && llm-shard export --to gguf '$TMP/p-tp0-pp0.llmk' -o '$TMP/x.gguf'"

# general.file_type says what most matmul weights are, not just h.0's c_attn (a block
# format leaves matrices whose rows do not fill its blocks in f32)
llm-quantize -q "$M" "$TMP/q8k.llmk" --type q8_0 --keep h.0.attn.c_attn.weight
expect_exit "export --to gguf of a q8_0 model with an f32 c_attn in layer 0" 0 llm-shard export --to gguf "$TMP/q8k.llmk" -o "$TMP/q8k.gguf"
check "... general.file_type 7 (mostly Q8_0), not 0" python3 - "$TMP/q8k.gguf" <<'PY'
import os, sys
sys.path.insert(0, os.environ["TMP"])
from llmkpy import gguf_kv
kv, ne = gguf_kv(sys.argv[1])
print("# general.file_type", kv["general.file_type"])
sys.exit(kv["general.file_type"] != 7)
PY

# a model with more embedding rows than tokens (vocab_size 300, a 257-token byte
# tokenizer): llama.cpp wants one token per token_embd row, so the GGUF token list is
# padded with "[PAD<id>]" tokens of type unused (5), as llama.cpp's converter does
hedit "$M" "$TMP/v300.llmk" 'vocab_size: 257' 'vocab_size: 300'
expect_exit "export --to gguf, vocab_size 300 > 257 tokens" 0 llm-shard export --to gguf "$TMP/v300.llmk" -o "$TMP/v300.gguf"
check "... 300 tokens (257 real, 43 [PAD<id>] unused) = token_embd rows" python3 - "$TMP/v300.gguf" <<'PY'
import os, sys
sys.path.insert(0, os.environ["TMP"])
from llmkpy import gguf_kv
kv, ne = gguf_kv(sys.argv[1])
tok, typ = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
assert len(tok) == len(typ) == ne["token_embd.weight"][1] == ne["output.weight"][1] == 300, (len(tok), ne["token_embd.weight"])
assert tok[256] == "<|endoftext|>" and typ[256] == 3 and typ[:256] == [1] * 256
assert tok[257:] == ["[PAD%d]" % i for i in range(257, 300)] and typ[257:] == [5] * 43
PY
echo "1..$_n"
