#!/usr/bin/env bash
# llm-shard convert: llm.c GPT-2 checkpoints (fp32 v3, bf16 v5) <-> .llmk, round trips
# byte for byte, pipes, and malformed llm.c files refused with exit 65.
. "$(dirname "$0")/lib.sh"
PY=${PY:-python3}

# mk OUT [key=value...]: a small llm.c model file; keys override the header/size.
mk() {
  "$PY" - "$@" <<'PY'
import struct, sys, random
out = sys.argv[1]
o = dict(a.split("=") for a in sys.argv[2:])
g = lambda k, d: int(o.get(k, d))
magic, ver = g("magic", 20240326), g("version", 3)
L, NH, C, V, maxT = g("L", 2), g("NH", 2), g("C", 8), g("V", 130), g("maxT", 8)
Vp = g("Vp", (V + 127) // 128 * 128)
h = [0] * 256; h[:8] = [magic, ver, maxT, V, L, NH, C, Vp]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
r = random.Random(5)
es = 4 if ver != 5 else 2
body = bytearray()
for i in range(n):
    x = 0.0 if V * C <= i < Vp * C else r.gauss(0, 0.02)
    b = struct.pack("<f", x)
    body += b if es == 4 else b[2:]
body = bytes(body)
extra = g("extra", 0)
cut = g("cut", 0)
data = struct.pack("<256i", *h) + body + b"\0" * extra
if cut: data = data[:len(data) - cut]
open(out, "wb").write(data)
PY
}

mk "$TMP/m3.bin"
expect_exit "v3 import" 0 llm-shard convert --from llmc "$TMP/m3.bin" -o "$TMP/m3.llmk"
expect_exit "v3 import verifies" 0 llm-shard verify -q "$TMP/m3.llmk"
expect_exit "v3 import from a pipe" 0 sh -c "cat '$TMP/m3.bin' | llm-shard convert --from llmc - -o '$TMP/m3p.llmk'"
check "... the same file" cmp -s "$TMP/m3.llmk" "$TMP/m3p.llmk"
# endless input is refused by its header, not read to the end of memory
expect_exit "import of /dev/zero: bad magic, 65" 65 timeout 20 llm-shard convert --from llmc /dev/zero -o "$TMP/z.llmk"
expect_exit "import of a valid header followed by endless bytes: 65" 65 timeout 20 \
  sh -c "cat '$TMP/m3.bin' /dev/zero | llm-shard convert --from llmc - -o '$TMP/z.llmk'"
check "... says there are trailing bytes" grep -q "trailing bytes" "$TMP/err"
llm-shard info "$TMP/m3.llmk" >"$TMP/info" 2>&1
check "v3 import: model section and f32 tensors" \
  grep -q "h.1.mlp.c_proj.weight.*f32" "$TMP/info"
check "v3 import: padded vocab recorded" grep -q "padded_vocab_size: 256" "$TMP/info"
expect_exit "v3 export" 0 llm-shard convert --to llmc "$TMP/m3.llmk" -o "$TMP/back3.bin"
check "v3 round trip byte-identical" cmp -s "$TMP/m3.bin" "$TMP/back3.bin"

mk "$TMP/m5.bin" version=5
expect_exit "v5 import" 0 llm-shard convert --from llmc "$TMP/m5.bin" -o "$TMP/m5.llmk"
llm-shard info "$TMP/m5.llmk" >"$TMP/info5" 2>&1
check "v5 import keeps bf16" grep -q "wte.*bf16" "$TMP/info5"
expect_exit "v5 export" 0 llm-shard convert --to llmc "$TMP/m5.llmk" -o "$TMP/back5.bin"
check "v5 round trip byte-identical" cmp -s "$TMP/m5.bin" "$TMP/back5.bin"

# an all-bf16 import (layer norms, biases and wpe too) runs in llm-infer: those are
# widened to f32 at load; the same model as the f32 one up to bf16 rounding
"$PY" - "$TMP/ids.bin" <<'PY'
import random, struct, sys
r = random.Random(4); ids = [r.randrange(130) for _ in range(200)]
h = [0] * 256; h[:3] = [20240520, 1, len(ids)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))
PY
llm-infer "$TMP/m3.llmk" --eval "$TMP/ids.bin" --ctx 8 -t 1 >"$TMP/e3" 2>"$TMP/err3"
expect_exit "v5 import: llm-infer --eval runs" 0 llm-infer "$TMP/m5.llmk" --eval "$TMP/ids.bin" --ctx 8 -t 1
check "... nll within 1e-3 of the f32 model's" "$PY" -c "
import json, sys
a, b = json.load(open('$TMP/e3')), json.load(open('$TMP/out'))
assert a['tokens'] == b['tokens'] and abs(a['nll'] - b['nll']) < 1e-3 * a['nll'], (a, b)"
# ... and on the emulated device, where the widened copies are uploaded and freed
E=$ROOT/build/emu/bin
[ "${LLM_SAN:-0}" = 1 ] && E=$ROOT/build/san/emu/bin
if [ -x "$E/llm-infer" ]; then
  "$E/llm-infer" "$TMP/m5.llmk" --eval "$TMP/ids.bin" --ctx 8 -t 1 --device cuda >"$TMP/e5c" 2>"$TMP/err5c"
  llm-infer "$TMP/m5.llmk" --eval "$TMP/ids.bin" --ctx 8 -t 1 >"$TMP/e5" 2>/dev/null
  check "... on cuda (emu) the cpu's nll within 1e-5" "$PY" -c "
import json
a, b = json.load(open('$TMP/e5')), json.load(open('$TMP/e5c'))
assert a['tokens'] == b['tokens'] and abs(a['nll'] - b['nll']) < 1e-5 * a['nll'], (a, b)"
else
  skip "v5 import on cuda (emu)" "no $E/llm-infer (make CUDA=emu all)"
fi
# ... and fine-tunes: model.init_from widens the bf16 weights to llm-train's f32 master
# weights (exact), giving the first loss of the f32 model up to bf16 rounding
for v in 3 5; do   # 257 tokens: the byte tokenizer's
  mk "$TMP/t$v.bin" version=$v V=257 && llm-shard convert --from llmc "$TMP/t$v.bin" -o "$TMP/t$v.llmk"
  printf 'model: {init_from: %s}\ndata: {train: %s, tokenizer: byte}\ntrain: {batch_size: 1, seq_len: 8, max_steps: 1, warmup_steps: 1, threads: 1, seed: 1}\n' \
    "$TMP/t$v.llmk" "$TMP/ids.bin" >"$TMP/ft$v.yaml"
  expect_exit "v$v import: llm-train model.init_from" 0 llm-train --config "$TMP/ft$v.yaml" -o "$TMP/ft$v" --metrics "$TMP/ft$v.jsonl"
done
check "... the same first loss to 1e-3" "$PY" -c "
import json
a, b = ([json.loads(l)['loss'] for l in open('$TMP/ft%d.jsonl' % v) if '\"loss\"' in l][0] for v in (3, 5))
assert abs(a - b) < 1e-3 * a, (a, b)"

# a model llm-quantize made bf16 keeps wpe, the norms and the biases f32; llm.c's version 5
# holds every parameter in bf16, so those are rounded on export (a note says so): the
# file is then the f32 model rounded to bf16 throughout.  f16 widens to version 3
# exactly; q8_0 is refused, saying what to do instead.
llm-quantize -q "$TMP/m3.llmk" "$TMP/mb.llmk" --type bf16
expect_exit "export of a bf16-quantized model (f32 wpe, norms, biases)" 0 llm-shard convert --to llmc "$TMP/mb.llmk" -o "$TMP/mb.bin"
check "... a note: which tensors were rounded to bf16" grep -q "note: 19 of the 28 parameter tensors rounded to bf16.*lossy" "$TMP/err"
check "... version 5, every parameter the f32 one rounded to bf16" "$PY" - "$TMP/m3.bin" "$TMP/mb.bin" <<'PY'
import struct, sys
a, b = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
assert struct.unpack_from('<2i', b) == (20240326, 5) and a[8:1024] == b[8:1024]
def bf(u): return (u + 0x7fff + ((u >> 16) & 1)) >> 16
x = struct.unpack_from('<%dI' % ((len(a) - 1024) // 4), a, 1024)
assert b[1024:] == struct.pack('<%dH' % len(x), *map(bf, x))
PY
llm-quantize -q "$TMP/m3.llmk" "$TMP/mh.llmk" --type f16
expect_exit "export of an f16-quantized model" 0 llm-shard convert --to llmc "$TMP/mh.llmk" -o "$TMP/mh.bin"
check "... version 3, the f16 weights widened exactly (a note)" sh -c "grep -q 'widened from f16 to f32.*exact' '$TMP/err' && \
  [ \"\$(od -An -tu4 -j4 -N4 '$TMP/mh.bin' | tr -d ' ')\" = 3 ] && llm-shard convert --from llmc '$TMP/mh.bin' -o '$TMP/mh3.llmk' && \
  llm-quantize -q '$TMP/mh3.llmk' '$TMP/mh3h.llmk' --type f16 && cmp -s '$TMP/mh3h.llmk' '$TMP/mh.llmk'"
mk "$TMP/m32.bin" C=32 && llm-shard convert --from llmc "$TMP/m32.bin" -o "$TMP/m32.llmk" && llm-quantize -q "$TMP/m32.llmk" "$TMP/m32q.llmk" --type q8_0
expect_exit "export of a q8_0 model: 65" 65 llm-shard convert --to llmc "$TMP/m32q.llmk" -o "$TMP/x.bin"
check "... saying why and what to do" grep -q "tensor 'wte' is q8_0: llm.c files hold f32 (version 3) or bf16 (version 5).*export --to gguf" "$TMP/err"

# an llm.c model has no tokenizer: its Hugging Face export has no tokenizer files, and
# says so on stderr instead of leaving AutoTokenizer to fail later
expect_exit "export --to safetensors without a tokenizer section: 0" 0 llm-shard export --to safetensors "$TMP/m3.llmk" -o "$TMP/hf3"
check "... a warning naming the missing files" grep -q "warning: .*m3.llmk' has no tokenizer section: no vocab.json, merges.txt or tokenizer_config.json written" "$TMP/err"
check "... model.safetensors and config.json only" [ "$(ls "$TMP/hf3" | tr '\n' ' ')" = "config.json model.safetensors " ]

pipe_rt() {
  llm-shard convert --from llmc - -o - <"$TMP/m3.bin" |
    llm-shard convert --to llmc - -o - | cmp -s - "$TMP/m3.bin"
}
check "round trip through pipes" pipe_rt

bad() { # name expected-code mk-args...
  local name=$1 code=$2; shift 2
  mk "$TMP/bad.bin" "$@"
  rm -f "$TMP/bad.llmk"
  expect_exit "refuses $name" "$code" llm-shard convert --from llmc "$TMP/bad.bin" -o "$TMP/bad.llmk"
}
bad "bad magic" 65 magic=20240520
bad "version 1" 65 version=1
bad "truncated data" 65 cut=3
bad "trailing bytes" 65 extra=4
bad "padded vocab not V rounded to 128" 65 Vp=200
bad "padded vocab below V" 65 V=300 Vp=256
bad "channels not divisible by heads" 65 NH=3
bad "zero layers" 65 L=0
bad "negative vocab" 65 V=-5 Vp=128
check "no output left behind after a refusal" test ! -e "$TMP/bad.llmk"
head -c 100 "$TMP/m3.bin" >"$TMP/short.bin"
expect_exit "refuses a short header" 65 llm-shard convert --from llmc "$TMP/short.bin" -o "$TMP/x.llmk"
: >"$TMP/empty.bin"
expect_exit "refuses an empty file" 65 llm-shard convert --from llmc "$TMP/empty.bin" -o "$TMP/x.llmk"
expect_exit "refuses an llm.c file as .llmk" 65 llm-shard convert --to llmc "$TMP/m3.bin" -o "$TMP/x.bin"
check "error names the problem" grep -q "magic\|llmk\|header" "$TMP/err"
expect_exit "missing input" 66 llm-shard convert --from llmc "$TMP/nope.bin" -o "$TMP/x.llmk"
expect_exit "usage: no -o" 64 llm-shard convert --from llmc "$TMP/m3.bin"
expect_exit "usage: --from and --to" 64 llm-shard convert --from llmc --to llmc "$TMP/m3.bin" -o "$TMP/x"
expect_exit "usage: unknown format" 64 llm-shard convert --from gguf "$TMP/m3.bin" -o "$TMP/x"
expect_exit "usage: no format" 64 llm-shard convert "$TMP/m3.bin" -o "$TMP/x"
echo "1..$_n"
