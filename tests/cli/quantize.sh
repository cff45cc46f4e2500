#!/bin/bash
# llm-quantize: every type writes a valid, smaller file of exactly the theoretical tensor
# sizes that llm-infer runs (--eval close to f32); --keep; pipes in and out give the same
# bytes; reports (table, JSON); optimizer state dropped; refusals and exit codes.
. "$(dirname "$0")/lib.sh"
PY=python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "llm-quantize tests" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1

tiny_data 200000 4096
tiny_model 30
cp "$M" m.llmk

check "help" llm-quantize --help
# threads: -j as in llm-bench/llm-profile/llm-tokenize; -t, the earlier spelling, still works
llm-quantize m.llmk tj.llmk --type q8_0 -j 1 -q && llm-quantize m.llmk tt.llmk --type q8_0 -t 1 -q \
  && cmp -s tj.llmk tt.llmk && ok "-j and -t set the threads alike" || notok "-j / -t"
llm-infer m.llmk --eval val.bin --ctx 64 --threads 2 >f32.json 2>err || notok "f32 eval: $(cat err)"
for ty in bf16 f16 q8_0 q4_0; do
  if llm-quantize m.llmk $ty.llmk --type $ty --json >$ty.rep 2>$ty.err; then ok "quantize $ty"; else notok "quantize $ty: $(cat $ty.err)"; continue; fi
  check "$ty verifies" llm-shard verify $ty.llmk
  if grep -q "dropped 56 optimizer tensor" $ty.err; then ok "$ty: optimizer state dropped with a notice"; else notok "$ty: no notice: $(cat $ty.err)"; fi
  # tensor sizes equal the theory; 1-D tensors, wpe and the tokenizer stay as they were
  if $PY - $ty.rep $ty.llmk <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1])); ty = r["type"]
per = {"bf16": 64, "f16": 64, "q8_0": 34, "q4_0": 18}[ty]
conv = [t for t in r["tensors"] if t["action"] == "convert"]
assert sorted(t["name"] for t in conv) == sorted(["wte"] + ["h.%d.%s.weight" % (l, m) for l in range(2)
        for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]), conv
for t in r["tensors"]:
    if t["action"] == "convert":
        assert t["bytes_out"] == t["elements"] * per // 32, t
        assert 0 < t["rel_err"] < {"bf16": 4e-3, "f16": 5e-4, "q8_0": 1e-2, "q4_0": 0.2}[ty], t
        assert t["max_abs_err"] > 0 and t["rmse"] > 0
    elif t["action"] == "copy":
        assert t["bytes_out"] == t["bytes_in"] and t["from"] == t["to"], t
    else:
        assert t["name"].startswith("opt."), t
tot = r["totals"]
assert tot["bytes_out"] == sum(t["bytes_out"] for t in r["tensors"])
size = os.path.getsize(sys.argv[2])
assert tot["file_bytes_out"] == size
# header + 64-byte alignment padding only
assert 0 < size - tot["bytes_out"] < 8192 + 64 * len(r["tensors"]), (size, tot)
PY
  then ok "$ty: sizes equal the theory"; else notok "$ty: sizes"; fi
  if llm-infer $ty.llmk --eval val.bin --ctx 64 --threads 2 >$ty.json 2>err; then ok "$ty: llm-infer --eval runs"
  else notok "$ty: eval: $(cat err)"; continue; fi
  lim=$(case $ty in q4_0) echo 1.10 ;; q8_0) echo 1.01 ;; *) echo 1.005 ;; esac)
  if $PY -c "import json,sys; a=json.load(open('f32.json'))['ppl']; b=json.load(open('$ty.json'))['ppl']; sys.exit(0 if b <= a*$lim and b >= a/$lim else 1)"
  then ok "$ty: perplexity within x$lim of f32"; else notok "$ty: perplexity $(cat f32.json) vs $(cat $ty.json)"; fi
  for dev in cpu cpu-ref; do
    llm-infer $ty.llmk -p "ROMEO:" -n 8 --temperature 0 --device $dev --threads 2 >gen.$dev 2>err || notok "$ty: generation on $dev: $(cat err)"
  done
  [ -s gen.cpu ] && ok "$ty: greedy generation runs (cpu, cpu-ref)" || notok "$ty: generation"
  if [ $ty = q4_0 ]; then
    # cpu repacks q4_0 at load wherever the CPU has AVX2 (LLM_Q4_REPACK unset or 1);
    # =0 keeps the plain q4_0 kernels
    llm-infer $ty.llmk -p "ROMEO:" -n 8 --temperature 0 --threads 2 -v >/dev/null 2>err.auto || notok "auto generation: $(cat err.auto)"
    LLM_Q4_REPACK=1 llm-infer $ty.llmk -p "ROMEO:" -n 8 --temperature 0 --threads 2 -v >gen.r1 2>err.r1 || notok "repacked generation: $(cat err.r1)"
    LLM_Q4_REPACK=0 llm-infer $ty.llmk -p "ROMEO:" -n 8 --temperature 0 --threads 2 -v >gen.r0 2>err.r0 || notok "plain generation: $(cat err.r0)"
    if cmp -s gen.r1 gen.cpu-ref && cmp -s gen.r0 gen.cpu-ref && cmp -s gen.cpu gen.cpu-ref; then ok "q4_0: the same greedy text repacked, plain and on cpu-ref"
    else notok "q4_0 greedy text differs: $(cat gen.r1) / $(cat gen.r0) / $(cat gen.cpu-ref)"; fi
    if grep -q "(0.0 MB of them repacked" err.r0 && grep -q "MB of them repacked" err.r1 &&
       { ! grep -qw avx2 /proc/cpuinfo ||
         { ! grep -q "(0.0 MB of them repacked" err.r1 && ! grep -q "(0.0 MB of them repacked" err.auto; }; }
    then ok "q4_0: -v reports the repacked bytes"; else notok "repack report: $(grep -h repacked err.r0 err.r1)"; fi
  fi
done
# the header records the type; train: is gone; model and tokenizer carried over
llm-shard info q4_0.llmk >info 2>&1
if grep -q "^quant:" info && grep -q "type: q4_0" info && ! grep -q "^train:" info && grep -q "^tokenizer:" info && grep -q "^model:" info
then ok "header: quant section, no train section"; else notok "header: $(head -c 400 info)"; fi

# top-level keys that are not mappings are kept too (llmk(5): other top-level keys are kept)
hedit m.llmk note.llmk '^model:' 'note: from run 7
tags: [a, b]
model:'
llm-quantize -q note.llmk noteq.llmk --type q8_0
check "header: a scalar and a sequence top-level key carried over" $PY -c "
import json, subprocess
j = json.loads(subprocess.check_output(['llm-shard', 'info', '--json', 'noteq.llmk']))
assert j['note'] == 'from run 7' and j['tags'] == ['a', 'b'] and j['quant']['type'] == 'q8_0', j.keys()"

# --keep
llm-quantize m.llmk keep.llmk --type q8_0 --keep wte --keep 'h.1.*' --json >keep.rep 2>err
if $PY -c "
import json; r=json.load(open('keep.rep')); t={x['name']: x for x in r['tensors']}
assert t['wte']['to']=='f32' and t['wte']['why']=='--keep'
assert t['h.1.mlp.c_fc.weight']['to']=='f32' and t['h.0.mlp.c_fc.weight']['to']=='q8_0'"; then ok "--keep globs"; else notok "--keep: $(cat err)"; fi
check "--keep file runs" llm-infer keep.llmk --eval val.bin --ctx 64 --threads 2

# pipes: stdin and stdout give the same bytes as files
cat m.llmk | llm-quantize - - --type q4_0 >pipe.llmk 2>err
check "pipes in and out: same bytes" cmp -s pipe.llmk q4_0.llmk
llm-quantize m.llmk - --type q8_0 --report >p8.llmk 2>rep.txt
if cmp -s p8.llmk q8_0.llmk && grep -q "^total" rep.txt; then ok "output to stdout: report on stderr"; else notok "stdout report"; fi
llm-quantize m.llmk r.llmk --type q8_0 --report >rep.txt 2>err
if grep -q "^h.0.attn.c_attn.weight *f32 *q8_0 *12288 *49152 *13056 " rep.txt && grep -q "^total " rep.txt
then ok "--report table"; else notok "--report table: $(head -5 rep.txt)"; fi

# same format again: tensors copied, identical to the first
check "q4_0 -> q4_0 copies" llm-quantize q4_0.llmk again.llmk --type q4_0
if cmp -s <(llm-shard info again.llmk | grep -A100 '^tensors' | grep -v quant) <(llm-shard info q4_0.llmk | grep -A100 '^tensors'); then ok "q4_0 -> q4_0: same tensors"; else notok "q4_0 -> q4_0 changed tensors"; fi

# same format again, q8_0: nothing converted, and the summary, report and header say the
# weights were kept as they were (not "0 converted" alone)
llm-quantize q8_0.llmk again8.llmk --type q8_0 2>err
check "q8_0 -> q8_0: the summary says 9 kept" grep -q "0 tensor(s) to q8_0 (9 already q8_0, copied as they are)" err
llm-quantize q8_0.llmk /dev/null --type q8_0 --json >again8.rep 2>err
check "... the JSON totals: converted 0, kept 9; header quant: converted 0, kept 9" $PY -c "
import json, subprocess
t = json.load(open('again8.rep'))['totals']; assert (t['converted'], t['kept']) == (0, 9), t
q = json.loads(subprocess.check_output(['llm-shard', 'info', '--json', 'again8.llmk']))['quant']
assert (q['converted'], q['kept']) == (0, 9), q
w = [x for x in json.load(open('again8.rep'))['tensors'] if x['name'] == 'wte'][0]
assert w['action'] == 'copy' and w['why'] == 'already in the type', w"
llm-quantize q8_0.llmk /dev/null --type q8_0 --report >rep.txt 2>err
check "... the table's last line" grep -q "^0 converted, 9 already q8_0 (kept as they are), 0 dropped" rep.txt

# quantized tensor-parallel shards (llm-shard(1)): split, quantize each shard (which
# drops their optimizer moments), merge: the file quantizing the whole model gives, byte
# for byte; and quantize, split, merge gives the quantized model back
mkdir -p sq
for ty in q8_0 bf16; do
  llm-shard split --tp 2 --pp 2 m.llmk -o sq/$ty 2>err || notok "split: $(cat err)"
  for f in sq/$ty-tp*-pp*.llmk; do llm-quantize -q "$f" "${f%.llmk}.q.llmk" --type $ty 2>err || notok "quantize $f: $(cat err)"; done
  expect_exit "$ty: split -> quantize each shard -> merge" 0 llm-shard merge sq/$ty-tp*-pp*.q.llmk -o sq/$ty-merged.llmk
  check "... the same file as quantizing the whole model" cmp -s sq/$ty-merged.llmk $ty.llmk
done
check "... the shard section lists the dropped moments' indices, and each converted entry" $PY -c "
import json, subprocess
s = json.loads(subprocess.check_output(['llm-shard', 'info', '--json', 'sq/q8_0-tp1-pp1.q.llmk']))['shard']
assert s['source_tensors'] == 84 and len(s['dropped']) > 0 and min(s['dropped']) >= 28, s['dropped']
t = {e['name']: e for e in s['tensors']}
assert not any(n.startswith('opt.') for n in t)
assert t['h.1.mlp.c_fc.weight']['quant'] == 'converted' and 'quant' not in t['h.1.ln_1.weight']"
for f in sq/q8_0-tp*-pp*.q.llmk; do llm-quantize -q "$f" "${f%.q.llmk}.qq.llmk" --type q8_0; done
llm-shard merge sq/q8_0-tp*-pp*.qq.llmk -o sq/qq.llmk 2>err
check "shards quantized q8_0 -> q8_0, merged: the file of q8_0 -> q8_0 on the whole (kept 9)" cmp -s sq/qq.llmk again8.llmk
# again with --keep: the tensors kept now lose the first run's 'converted' mark
llm-quantize -q q8_0.llmk againk.llmk --type q8_0 --keep 'h.0.*'
for f in sq/q8_0-tp*-pp*.q.llmk; do llm-quantize -q "$f" "${f%.q.llmk}.qk.llmk" --type q8_0 --keep 'h.0.*'; done
llm-shard merge sq/q8_0-tp*-pp*.qk.llmk -o sq/qk.llmk 2>err
check "shards quantized q8_0 -> q8_0 --keep, merged: the file of the whole (converted 0)" cmp -s sq/qk.llmk againk.llmk
llm-shard split --tp 2 --pp 2 q8_0.llmk -o sq/pre 2>err && llm-shard merge sq/pre-tp*-pp*.llmk -o sq/pre.llmk 2>>err
check "quantize -> split -> merge: the quantized model back" cmp -s sq/pre.llmk q8_0.llmk
expect_exit "merge of quantized and unquantized shards: 65" 65 llm-shard merge sq/q8_0-tp0-pp0.q.llmk sq/q8_0-tp1-pp0.q.llmk sq/q8_0-tp0-pp1.llmk sq/q8_0-tp1-pp1.llmk -o sq/x.llmk
check "... saying to quantize every shard alike" grep -q "quantize every shard of a split" "$TMP/err"
# the dropped list is hostile input too: a dropped index that another shard holds, or
# one outside the source
for v in 0 84; do
  hedit sq/q8_0-tp1-pp1.q.llmk sq/bad-tp1-pp1.q.llmk 'dropped:\n  - \d+' "dropped:\n  - $v"
  expect_exit "merge with tensor $v in a dropped list: 65" 65 llm-shard merge sq/q8_0-tp0-pp*.q.llmk sq/q8_0-tp1-pp0.q.llmk sq/bad-tp1-pp1.q.llmk -o sq/x.llmk
  check "... naming the problem" grep -q "$([ $v = 0 ] && echo "tensor 0 ('wte') was dropped from this shard but is in another" || echo "bad source index")" "$TMP/err"
done
expect_exit "merge of q8_0 and bf16 shards: 65" 65 llm-shard merge sq/q8_0-tp0-pp0.q.llmk sq/q8_0-tp1-pp0.q.llmk sq/bf16-tp0-pp1.q.llmk sq/bf16-tp1-pp1.q.llmk -o sq/x.llmk

# refusals
expect_exit "unknown type: 64" 64 llm-quantize m.llmk x.llmk --type q3_banana
expect_exit "f32 type: 64" 64 llm-quantize m.llmk x.llmk --type f32
expect_exit "missing --type: 64" 64 llm-quantize m.llmk x.llmk
echo "not a checkpoint" >junk.llmk
expect_exit "non-.llmk input: 65" 65 llm-quantize junk.llmk x.llmk --type q8_0
grep -q "not a valid .llmk file" "$TMP/err" && ok "non-.llmk: clear message" || notok "message: $(cat "$TMP/err")"
expect_exit "missing input: 66" 66 llm-quantize nope.llmk x.llmk --type q8_0
expect_exit "q4_0 -> q8_0 refused: 65" 65 llm-quantize q4_0.llmk x.llmk --type q8_0
grep -q "already quantized" "$TMP/err" && ok "requantize: clear message" || notok "message: $(cat "$TMP/err")"
expect_exit "q8_0 -> f16 refused: 65" 65 llm-quantize q8_0.llmk x.llmk --type f16
[ ! -e x.llmk ] && ok "no output after a refusal" || notok "x.llmk written"
# a block scale that is NaN or infinite, in a file whose checksums agree: llm-infer
# refuses it by name (65) instead of computing with NaN weights
nanscale() { "$PY" - "$@" <<'PY'
import re, struct, sys, zlib
src, dst, name, k, val = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5], 16)
d = bytearray(open(src, 'rb').read())
H = struct.unpack('<Q', d[12:20])[0]
hdr = d[20:20 + H].decode()
D0 = (20 + H + 63) // 64 * 64
m = re.search(r'- name: %s\n((?:  .*\n)*)' % re.escape(name), hdr)
off, stored = (int(re.search(r'  %s: (\d+)' % key, m.group(1)).group(1)) for key in ('offset', 'stored'))
per = 34 if 'dtype: q8_0' in m.group(1) else 18
at = D0 + off + k * per
d[at:at + 2] = struct.pack('<H', val)
crc = zlib.crc32(bytes(d[D0 + off:D0 + off + stored]))
new = hdr[:m.start(1)] + re.sub(r'crc32: \d+', 'crc32: %d' % crc, m.group(1), count=1) + hdr[m.end(1):]
assert stored == int(re.search(r'  nbytes: (\d+)', m.group(1)).group(1)), 'compressed'
out = d[:12] + struct.pack('<Q', len(new)) + new.encode()
D1 = (len(out) + 63) // 64 * 64
open(dst, 'wb').write(out + b'\0' * (D1 - len(out)) + d[D0:])
PY
}
for ty in q8_0 q4_0; do
  for v in 7e00 7c00; do
    nanscale $ty.llmk bad.llmk h.1.mlp.c_proj.weight 5 $v && llm-shard verify bad.llmk >/dev/null 2>&1 &&
      ok "$ty scale 0x$v: a file whose checksums agree" || notok "$ty scale 0x$v: the edited file does not verify"
    expect_exit "$ty scale 0x$v: llm-infer refuses it, 65" 65 llm-infer bad.llmk --eval val.bin --ctx 64 --threads 2
    check "... naming the tensor and the block" grep -q "h.1.mlp.c_proj.weight.*block 5 .*has scale $([ $v = 7e00 ] && echo nan || echo inf)" "$TMP/err"
  done
done
llm-quantize m.llmk r.llmk --type q8_0 --json 2>/dev/null | head -c 10 >/dev/null
ok "closed stdout does not hang"
echo "1..$_n"
