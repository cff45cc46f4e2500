#!/bin/bash
# llm-train: exact resume, keep_last, signals, kill -9 during saves, full disk, non-finite
# steps, refusal of mismatched checkpoints, a resume with another split of the same global
# batch (another batch_size and accumulation), gradient accumulation, metrics.
. "$(dirname "$0")/lib.sh"
PY=python3
# other processes share the cores: let idle OpenMP threads sleep instead of spinning
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "llm-train tests" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1

# byte-level token files (llm.c format, version 1): 90% train, 10% val
tiny_data
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, val: $TMP/val.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 64, max_steps: 12, lr: 0.003, warmup_steps: 2, eval_every: 6,
        eval_batches: 2, save_every: 4, keep_last: 2, seed: 99, threads: 2}
Y
# weights A B: the tensor data of two checkpoints is identical (headers may differ)
weights() { $PY - "$1" "$2" <<'PY'
import sys
def data(p):
    b = open(p, 'rb').read(); h = int.from_bytes(b[12:20], 'little')
    return b[(20 + h + 63) // 64 * 64:]
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}
verify() { if [ -x "$BIN/llm-shard" ]; then llm-shard verify "$1" >/dev/null 2>&1; else [ -s "$1" ]; fi; }

# ---- a straight run: metrics, evals, keep_last, prom ----
expect_exit "straight run of 12 steps" 0 llm-train --config run.yaml -o a --metrics a.jsonl --prom a.prom
check "12 step lines" [ "$(losses a.jsonl | wc -l)" = 12 ]
# train.device defaults to auto; on this machine (no GPU, a CUDA build too) it is the cpu
check "train.device defaults to auto" bash -c "llm-train --config run.yaml --print-config | grep -q 'device: auto'"
check "--device sets train.device" bash -c "llm-train --config run.yaml -d cpu-ref --print-config | grep -q 'device: cpu-ref'"
expect_exit "--device gpu is refused: 64" 64 llm-train --config run.yaml --device gpu --print-config
expect_exit "one step, verbose" 0 llm-train --config run.yaml -o dv --set train.max_steps=1 -v
check "... auto resolved to the cpu without a GPU" grep -q "device cpu" "$TMP/err"
check "... and no gpu_* fields" bash -c "! grep -q gpu_ a.jsonl"
check "2 eval lines at steps 6 and 12" [ "$(grep -c '"val_loss"' a.jsonl)" = 2 ]
$PY - a.jsonl <<'PY' && ok "step lines have every key" || notok "step lines lack keys"
import json, sys
keys = {"step","loss","lr","grad_norm","tokens_per_s","ms","mfu","rss_mb","skipped"}
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "loss" in j: assert keys <= set(j), set(j)
    else: assert set(j) == {"step", "val_loss"}
PY
# mfu = tokens/s x (6 N + 6 L T C) / train.peak_flops (llm.c's count, as llm-bench's)
expect_exit "two steps with train.peak_flops" 0 llm-train --config run.yaml -o pk --set train.max_steps=2 \
  --set train.eval_every=0 --set train.peak_flops=1e9 --metrics pk.jsonl
$PY - pk.jsonl <<'PY' && ok "mfu is 6N + 6LTC FLOPs per token over the peak" || notok "mfu formula"
import json, sys
L, C, V, maxT, T = 2, 64, 257, 64, 64
Vp = (V + 127) // 128 * 128
fpt = 6 * (Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C) + 6 * L * C * T
n = 0
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "mfu" not in j: continue
    want = j["tokens_per_s"] * fpt / 1e9
    assert abs(j["mfu"] - want) <= 1e-6 + 1e-3 * want, (j["mfu"], want)
    n += 1
assert n == 2, n
PY
# without train.peak_flops the CPU's peak is its measured FMA rate: the mfu is a fraction
# (a fixed 80 GFLOP/s per thread read 1.16 on an AVX-512 machine)
$PY - a.jsonl <<'PY' && ok "default CPU peak: 0 < mfu < 1" || notok "default CPU peak: mfu out of (0, 1)"
import json, sys
m = [json.loads(l)["mfu"] for l in open(sys.argv[1]) if '"mfu"' in l]
print("# mfu", min(m), max(m))
assert m and all(0 < x < 1 for x in m), m
PY
first=$(losses a.jsonl 2>/dev/null | head -1 | cut -d' ' -f2); last=$(losses a.jsonl | tail -1 | cut -d' ' -f2)
check "first loss near ln(257) ($first)" $PY -c "import sys; sys.exit(abs($first - 5.549) > 0.3)"
check "loss falls ($first -> $last)" $PY -c "import sys; sys.exit(not $last < $first - 0.5)"
check "keep_last 2: step 8 and 12 kept" [ "$(ls a)" = "$(printf 'step-00000008.llmk\nstep-00000012.llmk')" ]
check "checkpoints verify" verify a/step-00000012.llmk
check "prom file written" grep -qx "llmkit_train_step 12" a.prom
check "prom has val loss" grep -q "^llmkit_train_val_loss " a.prom
# a CPU run has no device health: no gpu_* field in the step lines, no gpu gauge
check "cpu run: no gpu fields in step lines" $PY -c "import sys; sys.exit('\"gpu_' in open('a.jsonl').read())"
check "cpu run: no gpu gauges in prom" $PY -c "import sys; sys.exit('gpu' in open('a.prom').read())"
expect_exit "--prom into a missing folder: 74 at the start" 74 llm-train --config run.yaml -o pm --prom nodir/x.prom
check "... named, and no step run" sh -c "grep -q \"prom file 'nodir/x.prom': cannot write in 'nodir'\" '$TMP/err' && [ ! -e pm ]"

# ---- exact resume: 6 steps + resume == 12 straight ----
expect_exit "first half (exit_after 6)" 0 llm-train --config run.yaml -o b --set train.exit_after=6 --metrics b1.jsonl
check "first half stopped at step 6" test -f b/step-00000006.llmk -a ! -f b/step-00000007.llmk
expect_exit "resume auto" 0 llm-train --config run.yaml -o b --resume auto --metrics b2.jsonl
check "resume names its checkpoint" grep -q "resuming from 'b/step-00000006.llmk' (step 6)" "$TMP/err"
check "losses identical bit for bit" diff <(losses a.jsonl) <(losses b1.jsonl b2.jsonl)
check "final weights and moments identical" weights a/step-00000012.llmk b/step-00000012.llmk
expect_exit "resume at the end does nothing" 0 llm-train --config run.yaml -o b --resume auto --metrics b3.jsonl
check "nothing to do" grep -q "nothing to do" "$TMP/err"
expect_exit "resume from a named file" 0 llm-train --config run.yaml -o b4 --resume a/step-00000008.llmk --metrics b4.jsonl
expect_exit "resume from a missing file: 66" 66 llm-train --config run.yaml -o nr --resume nope.llmk
check "... leaves no empty output directory behind" [ ! -e nr ]
mkdir -p keep
expect_exit "the same with -o deep in new directories: 66" 66 llm-train --config run.yaml -o keep/n1/n2/n3 --resume nope.llmk
check "... leaves none of the directories it made, and what was there" sh -c "[ ! -e keep/n1 ] && [ -d keep ]"
mkdir -p keep/o1 && : >keep/o1/other
expect_exit "... and where another file came to be beside them: 66" 66 llm-train --config run.yaml -o keep/o1/n2 --resume nope.llmk
check "... that directory stays" sh -c "[ ! -e keep/o1/n2 ] && [ -f keep/o1/other ]"
# a checkpoint whose train section is out of range (hedit: lib.sh)
for v in 9223372036854775807 2147483648 -3; do
  hedit a/step-00000012.llmk "step$v.llmk" '(?m)^(train:\n(?:  .*\n)*?  step: )12$' "\g<1>$v"
  expect_exit "resume from a checkpoint at step $v: 65" 65 llm-train --config run.yaml -o s$v --resume "step$v.llmk"
  check "... a clean message" grep -q "step$v.llmk': bad train section$" "$TMP/err"
done
# ... or whose saved config's batch shape is outside what the config allows
for kv in batch_size:0 batch_size:65537 seq_len:1048577 total_batch_tokens:-256; do
  hedit a/step-00000012.llmk "bs$kv.llmk" "(?m)^(      ${kv%%:*}: )[0-9]+\$" "\g<1>${kv#*:}"
  expect_exit "resume from a checkpoint saved with $kv: 65" 65 llm-train --config run.yaml -o "bs$kv" --resume "bs$kv.llmk"
  check "... a clean message" grep -q "bs$kv.llmk': bad train.config batch shape$" "$TMP/err"
done
hedit a/step-00000012.llmk lsbad.llmk '(?m)^(train:\n(?:  .*\n)*?  skipped: )0$' '\g<1>-7'
expect_exit "resume with skipped -7: 65" 65 llm-train --config run.yaml -o sk --resume lsbad.llmk
: >afile
expect_exit "-o naming a file: exit 74 at the start" 74 llm-train --config run.yaml -o afile --metrics af.jsonl
check "... before any step" [ ! -s af.jsonl ]
check "named-file resume continues the curve" diff <(losses a.jsonl | tail -4) <(losses b4.jsonl)
expect_exit "resume auto in an empty dir starts fresh" 0 llm-train --config run.yaml -o fresh --resume auto --set train.max_steps=2 --metrics f.jsonl
check "fresh start equals the straight run" diff <(losses a.jsonl 2>/dev/null | head -2) <(losses f.jsonl)
# ---- an output directory whose checkpoints the run would not continue is refused ----
# (keep_last pruned the new run's checkpoints and kept the old ones, which --resume auto
# then took for the new run's)
cp -r a reuse
expect_exit "-o at another run's checkpoints without --resume: 64" 64 llm-train --config run.yaml -o reuse --set train.max_steps=2 --set train.save_every=1 --metrics /dev/null
check "... named" grep -q "'reuse' already holds checkpoints (the newest of step 12): continue that run with --resume auto" "$TMP/err"
check "... the directory untouched" [ "$(ls reuse)" = "$(ls a)" ]
expect_exit "resume from step 8 into a directory holding step 12: 64" 64 llm-train --config run.yaml -o reuse --resume reuse/step-00000008.llmk --set train.save_every=1 --metrics /dev/null
check "... named" grep -q "'reuse' holds checkpoints after step 8 of 'reuse/step-00000008.llmk' (the newest of step 12)" "$TMP/err"
check "... the directory untouched" [ "$(ls reuse)" = "$(ls a)" ]
expect_exit "resume from the newest by name into its directory" 0 llm-train --config run.yaml -o reuse --resume reuse/step-00000012.llmk --set train.max_steps=13 --metrics /dev/null

# ---- a resume refuses data.train matching other files than the run it continues ----
# (its data position is a file index and an offset: in other files, other tokens)
mkdir -p sh sh2
$PY - <<'PY'
import struct
def w(p, t):
    with open(p, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, len(t), *([0] * 253))); f.write(struct.pack('<%dH' % len(t), *t))
b = open('train.bin', 'rb').read()[1024:]; t = struct.unpack('<%dH' % (len(b) // 2), b)
w('sh/shard_0.bin', t[:20000]); w('sh/shard_1.bin', t[20000:40000]); w('shard_2.bin', t[40000:60000])
PY
shrun=(llm-train --config run.yaml --set data.sampling=sequential --metrics /dev/null)
expect_exit "2 shards: 3 steps" 0 "${shrun[@]}" -o shr --set data.train="$TMP/sh/shard_*.bin" --set train.exit_after=3
cp sh/shard_0.bin sh/shard_1.bin sh2/
cp shard_2.bin sh/
expect_exit "a shard added: the resume is refused, 65" 65 "${shrun[@]}" -o shr --set data.train="$TMP/sh/shard_*.bin" --resume auto
check "... named, with the way on" grep -q "checkpoint 'shr/step-00000003.llmk': data.train '$TMP/sh/shard_\*.bin' is not the data of the run it continues (3 file(s) of 60000 tokens now, 2 of 40000 then), where its data position means other tokens: restore those files, or start a new run from its weights (model.init_from, in another output directory)$" "$TMP/err"
check "... nothing written" [ "$(ls shr)" = step-00000003.llmk ]
rm sh/shard_1.bin
expect_exit "a shard removed (2 again, other ones): refused, 65" 65 "${shrun[@]}" -o shr --set data.train="$TMP/sh/shard_*.bin" --resume auto
check "... the same count and length, other names: said" grep -q "(2 file(s) of 40000 tokens now, 2 of 40000 then, under other names or with other lengths)" "$TMP/err"
expect_exit "a file of another length under the same name: refused, 65" 65 "${shrun[@]}" -o shr --set data.train="$TMP/sh/shard_0.bin" --resume auto
# a position in a file that is gone (file 1 of 2, 1 now): the same refusal, not a
# damaged checkpoint
$PY - <<'PY'
import struct
def w(p, t):
    with open(p, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, len(t), *([0] * 253))); f.write(struct.pack('<%dH' % len(t), *t))
b = open('train.bin', 'rb').read()[1024:]; t = struct.unpack('<%dH' % (len(b) // 2), b)
w('sh/small_0.bin', t[:1000]); w('sh/small_1.bin', t[1000:2000])
PY
expect_exit "2 small shards: 5 steps, into the second" 0 "${shrun[@]}" -o shs --set data.train="$TMP/sh/small_*.bin" --set train.exit_after=5
expect_exit "... the second removed: refused, 65" 65 "${shrun[@]}" -o shs --set data.train="$TMP/sh/small_0.bin" --resume auto
check "... named as other files (1 of 1000 tokens now, 2 of 2000 then)" grep -q "is not the data of the run it continues (1 file(s) of 1000 tokens now, 2 of 2000 then)" "$TMP/err"
expect_exit "the same files in another folder: resumed" 0 "${shrun[@]}" -o shr --set data.train="$TMP/sh2/shard_*.bin" --resume auto --set train.exit_after=1
check "... from step 3" grep -q "resuming from 'shr/step-00000003.llmk' (step 3)" "$TMP/err"
# a checkpoint written before the files were recorded resumes unchecked
hedit shr/step-00000004.llmk oldpos.llmk '\n    files: .*\n    tokens: .*\n    files_hash: .*' ''
check "... (a checkpoint without them: made)" sh -c "! llm-shard info oldpos.llmk | grep -q files_hash"
expect_exit "a checkpoint without the files: resumed on other files" 0 "${shrun[@]}" -o shr_old --set data.train="$TMP/sh/shard_*.bin" --resume oldpos.llmk --set train.exit_after=1
check "... and its checkpoint records them" sh -c "llm-shard info shr_old/step-00000005.llmk | grep -q \"files: '2'\""

# ---- refusal of a checkpoint that does not match ----
expect_exit "resume with another model refused (65)" 65 llm-train --config run.yaml -o b --resume auto --set model.n_embd=32
check "difference named" grep -q "model.n_embd: 64 in the checkpoint, 32 in the config" "$TMP/err"
expect_exit "resume with another global batch refused (65)" 65 llm-train --config run.yaml -o b --resume auto --set train.batch_size=2 --set train.max_steps=20
check "... the tokens per step named, and what to set" grep -q "train.total_batch_tokens (effective): 256 in the checkpoint, 128 in the config (train.total_batch_tokens is unset, so ranks x batch_size x seq_len = 1 x 2 x 64: set train.total_batch_tokens to 256 to go on" "$TMP/err"
expect_exit "resume from a missing file (66)" 66 llm-train --config run.yaml -o b --resume nope.llmk

# ---- hostile data: an id beyond the vocabulary is found and named ----
$PY - <<'PY'
import struct
t = [65] * 5000; t[3000] = 300
with open('badid.bin', 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, len(t), *([0] * 253))); f.write(struct.pack('<%dH' % len(t), *t))
PY
# B x T = 256 tokens a step, read in order: position 3000 is in step 12's batch
bad=(--set data.train="$TMP/badid.bin" --set data.sampling=sequential --set train.max_steps=20 --set train.save_every=1000)
expect_exit "an id beyond the vocabulary in step 12: exit 65" 65 llm-train --config run.yaml -o bad "${bad[@]}" --metrics bad.jsonl
check "the bad id is named" grep -q "badid.bin': token id 300 at position 3000 is not below the vocabulary size 257" "$TMP/err"
# ... and the 11 steps done are not lost (save_every 1000): saved as step 11, the state a
# run of 11 steps on the same data ends in (weights, moments, the data position after its
# batches), which a resume continues from, meeting the same id at once
check "... the state after step 11 is saved" [ "$(ls bad 2>/dev/null)" = step-00000011.llmk ]
check "... said with the error" grep -q "vocabulary size 257 (the state after step 11, the last complete one, is saved in 'bad/step-00000011.llmk')$" "$TMP/err"
check "... it verifies" verify bad/step-00000011.llmk
# the train section of a checkpoint but its config (exit_after differs)
trainsec() { llm-shard info "$1" | sed -n '/^train:/,/^  config:/p'; }
expect_exit "11 steps of the same data" 0 llm-train --config run.yaml -o bad11 "${bad[@]}" --set train.exit_after=11 --metrics /dev/null
check "... the same weights and moments" weights bad/step-00000011.llmk bad11/step-00000011.llmk
check "... the same train section (step, data position)" diff <(trainsec bad/step-00000011.llmk) <(trainsec bad11/step-00000011.llmk)
expect_exit "resumed: the same id, exit 65" 65 llm-train --config run.yaml -o bad "${bad[@]}" --resume auto --metrics bad2.jsonl
check "... at once, named, nothing more written" sh -c "grep -q \"resuming from 'bad/step-00000011.llmk'\" '$TMP/err' && grep -q 'token id 300 at position 3000' '$TMP/err' && [ ! -s bad2.jsonl ] && [ \"\$(ls bad)\" = step-00000011.llmk ]"
# with accumulation the bad batch is the second of step 6: the first one read is not in the
# data position saved
expect_exit "B=4 x 2: an id beyond the vocabulary in step 6: exit 65" 65 llm-train --config run.yaml -o bada "${bad[@]}" --set train.total_batch_tokens=512 --metrics /dev/null
check "... the state after step 5 is saved" [ "$(ls bada 2>/dev/null)" = step-00000005.llmk ]
expect_exit "B=4 x 2: 5 steps of the same data" 0 llm-train --config run.yaml -o bada5 "${bad[@]}" --set train.total_batch_tokens=512 --set train.exit_after=5 --metrics /dev/null
check "... the same train section (step, data position)" diff <(trainsec bada/step-00000005.llmk) <(trainsec bada5/step-00000005.llmk)
check "... the same weights and moments" weights bada/step-00000005.llmk bada5/step-00000005.llmk
expect_exit "a bad id in step 1: exit 65" 65 llm-train --config run.yaml -o bad0 "${bad[@]}" --set train.batch_size=64 --set train.max_steps=2 --metrics /dev/null
check "... no checkpoint of the untrained model" [ -z "$(ls bad0 2>/dev/null)" ]
# in data.val it is found at the start, not at the first evaluation: by default (eval_every
# 0) after the last step, which then ended the run without its final checkpoint
expect_exit "an id beyond the vocabulary in data.val: exit 65" 65 llm-train --config run.yaml -o badval --set data.val="$TMP/badid.bin" --set train.eval_every=0 --set train.eval_batches=20 --set train.max_steps=3 --metrics badval.jsonl
check "... before the first step" [ ! -s badval.jsonl ]
check "... named" grep -q "data.val: '.*badid.bin': token id 300 at position 3000" "$TMP/err"
expect_exit "... but beyond the eval_batches read: no error" 0 llm-train --config run.yaml -o badval2 --set data.val="$TMP/badid.bin" --set train.eval_every=0 --set train.eval_batches=2 --set train.max_steps=1 --metrics /dev/null
check "... and no warning that val wraps around" sh -c "! grep -q 'wraps around' '$TMP/err'"
# a val file shorter than eval_batches batches: scored windows repeat, and it is said
$PY -c "import struct; open('shortval.bin', 'wb').write(struct.pack('<256i', 20240520, 1, 600, *([0] * 253)) + bytes(1200))"
expect_exit "a val file of 600 tokens, eval_batches 20" 0 llm-train --config run.yaml -o shortval --set data.val="$TMP/shortval.bin" --set train.eval_batches=20 --set train.max_steps=1 --metrics /dev/null
check "... said: it wraps around within 3 batches" grep -q "data.val wraps around within 3 batch(es) of 4 x 64 tokens; train.eval_batches 20 scores" "$TMP/err"

# ---- errors after some steps: the last complete step is saved (LLM_TRAIN_FAULT: llm-train.1) ----
nosave=(--set train.save_every=1000 --metrics /dev/null)
LLM_TRAIN_FAULT=step:7 expect_exit "out of memory in step 7: exit 71" 71 llm-train --config run.yaml -o oom "${nosave[@]}"
check "... the state after step 6 is saved" [ "$(ls oom 2>/dev/null)" = step-00000006.llmk ]
check "... said with the error" grep -q "out of memory (test hook LLM_TRAIN_FAULT=step:7) (the state after step 6, the last complete one, is saved in 'oom/step-00000006.llmk')$" "$TMP/err"
expect_exit "6 steps" 0 llm-train --config run.yaml -o oom6 "${nosave[@]}" --set train.exit_after=6
check "... the same weights and moments" weights oom/step-00000006.llmk oom6/step-00000006.llmk
check "... the same train section (step, data position)" diff <(trainsec oom/step-00000006.llmk) <(trainsec oom6/step-00000006.llmk)
expect_exit "... resumed: the straight run's end" 0 llm-train --config run.yaml -o oom --resume auto "${nosave[@]}"
check "... the same final weights" weights a/step-00000012.llmk oom/step-00000012.llmk
LLM_TRAIN_FAULT=eval:6 expect_exit "out of memory in the evaluation after step 6: exit 71" 71 llm-train --config run.yaml -o oome "${nosave[@]}"
check "... the state after step 6 is saved, said" sh -c "[ \"\$(ls oome 2>/dev/null)\" = step-00000006.llmk ] && grep -q \"LLM_TRAIN_FAULT=eval:6) (the state after step 6, the last complete one, is saved in 'oome/step-00000006.llmk')\$\" '$TMP/err'"
check "... the same weights and moments as 6 steps" weights oome/step-00000006.llmk oom6/step-00000006.llmk
LLM_TRAIN_FAULT=step:5 expect_exit "out of memory in step 5, step 4 saved already: exit 71" 71 llm-train --config run.yaml -o oom4 --set train.save_every=4 --metrics /dev/null
check "... nothing more written or said" sh -c "[ \"\$(ls oom4)\" = step-00000004.llmk ] && ! grep -q 'last complete' '$TMP/err'"
# the save fails too (a full disk): both reasons, the first error's exit status
LLM_FAULT_WRITE_LIMIT=1000 LLM_TRAIN_FAULT=step:7 expect_exit "out of memory in step 7, then a full disk: exit 71" 71 llm-train --config run.yaml -o oomd "${nosave[@]}"
check "... both said" grep -q "out of memory (test hook LLM_TRAIN_FAULT=step:7); the state after step 6, the last complete one, is not saved: checkpoint 'oomd/step-00000006.llmk' not written: .*no space left on device" "$TMP/err"
check "... no file" [ -z "$(ls -A oomd 2>/dev/null)" ]
# a sample that fails is a warning: the run goes on
LLM_TRAIN_FAULT=sample:6 expect_exit "the sample after step 6 fails: exit 0" 0 llm-train --config run.yaml -o smp --set train.sample_tokens=8 --metrics smp.jsonl
check "... a warning" grep -q "warning: step 6: no sample: out of memory (test hook LLM_TRAIN_FAULT=sample:6)" "$TMP/err"
check "... the run went on to step 12, with its sample" sh -c "[ -f smp/step-00000012.llmk ] && grep -q -- '---- sample at step 12 ----' '$TMP/err' && ! grep -q -- '---- sample at step 6' '$TMP/err'"
check "... the straight run's losses" diff <(losses a.jsonl) <(losses smp.jsonl)
expect_exit "LLM_TRAIN_FAULT=step:0 refused: 64" 64 env LLM_TRAIN_FAULT=step:0 llm-train --config run.yaml -o ff --metrics /dev/null
check "... named" grep -q "LLM_TRAIN_FAULT 'step:0': want step:N, eval:N, sample:N or data:N" "$TMP/err"
# the read of a step's batches fails as bad data would (the hook the distributed tests give
# one rank): the state after the last complete step is saved, exit 65
LLM_TRAIN_FAULT=data:7 expect_exit "bad data in step 7 (LLM_TRAIN_FAULT=data:7): exit 65" 65 llm-train --config run.yaml -o dat "${nosave[@]}"
check "... the state after step 6 is saved, said" sh -c "[ \"\$(ls dat 2>/dev/null)\" = step-00000006.llmk ] && grep -q \"step 7: bad data (test hook LLM_TRAIN_FAULT=data:7) (the state after step 6, the last complete one, is saved in 'dat/step-00000006.llmk')\$\" '$TMP/err'"
check "... the same weights and moments as 6 steps" weights dat/step-00000006.llmk oom6/step-00000006.llmk

# ---- gradient accumulation: B=4 x 2 == B=8 x 1 ----
expect_exit "B=8 x 1" 0 llm-train --config run.yaml -o g8 --set train.batch_size=8 --set train.max_steps=3 --metrics g8.jsonl
expect_exit "B=4 x 2" 0 llm-train --config run.yaml -o g4 --set train.total_batch_tokens=512 --set train.max_steps=3 --metrics g4.jsonl
$PY - g8.jsonl g4.jsonl <<'PY' && ok "accumulated losses equal to 1e-6" || notok "accumulation differs"
import json, sys
a, b = [[json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
assert len(a) == len(b) == 3
for x, y in zip(a, b): assert abs(x - y) <= 1e-6 * max(1, abs(x)), (x, y)
PY

# ---- a resume with another split of the same global batch (8 rows of 64 per step) ----
# 3 steps with B=8, then 3 more with B=4 x 2 or B=2 x 4 accumulation steps == 6 steps with
# B=8 (losses and weights, to rounding: the accumulation sums in another order)
S=(--set train.batch_size=8 --set train.max_steps=6 --set train.eval_every=3 --set train.save_every=1000)
expect_exit "B=8: 6 steps" 0 llm-train --config run.yaml -o sp "${S[@]}" --metrics sp.jsonl
expect_exit "B=8: 3 steps" 0 llm-train --config run.yaml -o sp3 "${S[@]}" --set train.exit_after=3 --metrics sp3.jsonl
cp -r sp3 sp4; cp -r sp3 sp2
expect_exit "... resumed with B=4 x 2 (total_batch_tokens 512), eval_batches 4" 0 llm-train --config run.yaml -o sp4 "${S[@]}" --set train.batch_size=4 --set train.total_batch_tokens=512 --set train.eval_batches=4 --resume auto --metrics sp4.jsonl
check "... said so, with no warning (the evaluations score the same 16 windows)" sh -c "grep -q 'resuming with batch_size 4 (was 8): same global batch of 512 tokens (1 rank(s) x batch_size 4 x seq_len 64 x 2 accumulation step(s))' '$TMP/err' && ! grep -q warning '$TMP/err'"
cat sp3.jsonl sp4.jsonl >sp34.jsonl
check "... the losses of the B=8 run (1e-5)" close sp.jsonl sp34.jsonl
check "... its weights and moments at step 6" wclose sp/step-00000006.llmk sp4/step-00000006.llmk
$PY - sp.jsonl sp34.jsonl <<'PY' && ok "... its val_loss at steps 3 and 6 (1e-5)" || notok "val_loss differs"
import json, sys
a, b = [[json.loads(l)["val_loss"] for l in open(p) if '"val_loss"' in l] for p in sys.argv[1:]]
assert len(a) == len(b) == 2, (a, b)
for x, y in zip(a, b): assert abs(x - y) <= 1e-5 * abs(x), (x, y)
PY
check "... the data position counts batches of 4: 6 + 3 x 2 (3 x 8 rows, then 3 x 2 x 4)" sh -c "llm-shard info sp4/step-00000006.llmk | grep -q \"batches: '12'\""
expect_exit "... resumed with B=2 x 4, eval_batches 2" 0 llm-train --config run.yaml -o sp2 "${S[@]}" --set train.batch_size=2 --set train.total_batch_tokens=512 --resume auto --metrics sp2.jsonl
check "... warned: the evaluations score other windows" grep -q "warning: the evaluations now score 4 windows of data.val (train.eval_batches 2 x batch_size 2), 16 before: val_loss is not comparable across the resume; train.eval_batches 8 scores the same ones" "$TMP/err"
cat sp3.jsonl sp2.jsonl >sp32.jsonl
check "... the losses of the B=8 run (1e-5)" close sp.jsonl sp32.jsonl
check "... its weights and moments at step 6" wclose sp/step-00000006.llmk sp2/step-00000006.llmk
cp -r sp3 spx
expect_exit "another split, total_batch_tokens unset: refused (65)" 65 llm-train --config run.yaml -o spx "${S[@]}" --set train.batch_size=4 --resume auto
check "... naming the tokens per step and what to set" grep -q "refusing to resume from 'spx/step-00000003.llmk': train.total_batch_tokens (effective): 512 in the checkpoint, 256 in the config (train.total_batch_tokens is unset, so ranks x batch_size x seq_len = 1 x 4 x 64: set train.total_batch_tokens to 512 to go on with the same global batch)$" "$TMP/err"
expect_exit "a batch_size that cannot split 8 rows: refused (65)" 65 llm-train --config run.yaml -o spx "${S[@]}" --set train.batch_size=3 --resume auto
check "... naming the rows" grep -q "512 in the checkpoint, 192 in the config (.*needs a batch_size and ranks whose product divides its 8 rows)$" "$TMP/err"
expect_exit "another global batch: refused (65)" 65 llm-train --config run.yaml -o spx "${S[@]}" --set train.batch_size=4 --set train.total_batch_tokens=1024 --resume auto
check "... naming it alone (batch_size is no difference)" grep -q "refusing to resume from 'spx/step-00000003.llmk': train.total_batch_tokens (effective): 512 in the checkpoint, 1024 in the config$" "$TMP/err"
expect_exit "another seq_len, the same tokens per step: refused (65)" 65 llm-train --config run.yaml -o spx "${S[@]}" --set train.seq_len=32 --set train.batch_size=16 --resume auto
check "... naming it alone" grep -q "refusing to resume from 'spx/step-00000003.llmk': train.seq_len: 64 in the checkpoint, 32 in the config$" "$TMP/err"
check "... nothing written" [ "$(ls spx)" = step-00000003.llmk ]

# ---- SIGTERM, SIGUSR1: finish the step, checkpoint, exit 0; the resumed curve continues ----
# sig_run SIG DIR [ARGS...]: start a run far longer than the test (max_steps 1000000, no
# periodic save) with metrics in DIR.jsonl and stderr in DIR.err, wait until the metrics
# show step 2 (so the signal lands in the loop, not the start), send SIG and wait for the
# end (generous limits, no timing asserted); sets RC (124: it did not end: killed) and
# STEP (the last step in the metrics)
LONG=(--set train.max_steps=1000000 --set train.save_every=1000000)
sig_run() {
  local sig=$1 dir=$2 pid i s; shift 2
  llm-train --config run.yaml -o "$dir" "${LONG[@]}" --metrics "$dir.jsonl" "$@" 2>"$dir.err" &
  pid=$!
  for i in $(seq 1 1200); do
    s=$(losses "$dir.jsonl" 2>/dev/null | tail -1 | cut -d' ' -f1)
    [ "${s:-0}" -ge 2 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill -"$sig" $pid
  for i in $(seq 1 3000); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then kill -9 $pid; wait $pid; RC=124; else wait $pid; RC=$?; fi
  STEP=$(losses "$dir.jsonl" 2>/dev/null | tail -1 | cut -d' ' -f1)
}
# sig_checks NAME DIR: exit 0, one checkpoint: of the last step logged, at least 2 and
# before max_steps, which verifies
sig_checks() {
  local name=$1 dir=$2 ck
  check "$name: exit 0 (got $RC)" [ "$RC" = 0 ]
  check "$name: stopped in the loop, at step ${STEP:-none} (>= 2, < max_steps)" \
    sh -c "[ '${STEP:-0}' -ge 2 ] && [ '${STEP:-0}' -lt 1000000 ]"
  check "$name: said so" grep -q "stopping at step ${STEP:-none} on a signal" "$dir.err"
  check "$name: one checkpoint, of that step" [ "$(ls "$dir" 2>/dev/null)" = "$(printf 'step-%08d.llmk' "${STEP:-0}")" ]
  ck=$(printf '%s/step-%08d.llmk' "$dir" "${STEP:-0}")
  check "$name: it verifies" verify "$ck"
}
sig_run TERM c
sig_checks SIGTERM c
# resumed for 2 more steps: the losses of a straight run of as many steps, bit for bit
expect_exit "SIGTERM: resume for 2 steps" 0 llm-train --config run.yaml -o c --resume auto "${LONG[@]}" --set train.exit_after=2 --metrics c2.jsonl
expect_exit "SIGTERM: a straight run of $((STEP + 2)) steps" 0 llm-train --config run.yaml -o cs "${LONG[@]}" --set train.exit_after=$((STEP + 2)) --metrics cs.jsonl
check "SIGTERM: resumed curve identical to the straight one" diff <(losses cs.jsonl) <(losses c.jsonl c2.jsonl)
check "... and the same final weights" weights "$(printf 'cs/step-%08d.llmk' $((STEP + 2)))" "$(printf 'c/step-%08d.llmk' $((STEP + 2)))"
sig_run USR1 u
sig_checks SIGUSR1 u
# a second SIGINT ends at once; the last complete checkpoint is unharmed
llm-train --config run.yaml -o i "${LONG[@]}" --set train.save_every=1 --set train.keep_last=3 --metrics i.jsonl 2>/dev/null &
pid=$!
for i in $(seq 1 1200); do sleep 0.1; [ "$(grep -c '"loss"' i.jsonl 2>/dev/null)" -ge 2 ] && break; done
kill -INT $pid; kill -INT $pid
for i in $(seq 1 3000); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && kill -9 $pid
wait $pid; rc=$?
# both signals may arrive before the handler runs, and count as one: then a clean 0
check "double SIGINT: exit 130 or a clean 0 (got $rc)" test $rc = 130 -o $rc = 0
okv=1; for f in i/step-*.llmk; do verify "$f" || okv=0; done
check "double SIGINT: every checkpoint verifies" [ $okv = 1 ]

# ---- a data file cut in place during the run: an error (65), not SIGBUS; the last
# complete step is saved ----
cp "$TMP/train.bin" cut.bin
llm-train --config run.yaml -o cutrun "${LONG[@]}" --set data.train="$TMP/cut.bin" --set train.eval_every=0 \
  --metrics cut.jsonl 2>cut.err &
pid=$!
for i in $(seq 1 1200); do
  s=$(losses cut.jsonl 2>/dev/null | tail -1 | cut -d' ' -f1)
  [ "${s:-0}" -ge 2 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
truncate -s 2048 cut.bin
for i in $(seq 1 3000); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; wait $pid; rc=124; else wait $pid; rc=$?; fi
STEP=$(losses cut.jsonl 2>/dev/null | tail -1 | cut -d' ' -f1)
check "data file truncated mid-run: exit 65, not a SIGBUS (got $rc)" [ "$rc" = 65 ]
check "... says the file shrank" grep -q "cut.bin': the file shrank while it was read" cut.err
check "... and saves the last complete step (${STEP:-none})" verify "$(printf 'cutrun/step-%08d.llmk' "${STEP:-0}")"

# ---- a signal during the start: a clean stop before the first step, nothing written ----
# fifo_term FIFO FEED CMD...: start CMD, wait until it opens FIFO to read (its handlers are
# in place by then), SIGTERM it, then write the file FEED into FIFO ("": keep it open and
# write nothing); prints CMD's exit status (128 + N when signal N killed it), its stderr
# in $TMP/err
fifo_term() { $PY - "$@" <<'PY'
import errno, os, signal, subprocess, sys, time
fifo, feed, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.environ["TMP"] + "/err", "w"))
for _ in range(1200):  # a writer's open that does not wait succeeds once a reader waits in its open
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        break
    except OSError as e:
        if e.errno != errno.ENXIO or p.poll() is not None:
            raise
        time.sleep(0.05)
p.send_signal(signal.SIGTERM)
if feed:
    os.set_blocking(fd, True)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(open(feed, "rb").read())
    except BrokenPipeError:
        pass
try:
    rc = p.wait(timeout=60)
except subprocess.TimeoutExpired:
    p.kill()
    rc = p.wait()
if not feed:
    os.close(fd)
print(128 - rc if rc < 0 else rc)
PY
}
mkfifo cfg.fifo ck.fifo
rc=$(fifo_term cfg.fifo "" llm-train --config cfg.fifo -o sc --metrics sc.jsonl)
check "SIGTERM while the config is read: exit 0 (got $rc)" [ "$rc" = 0 ]
check "... said, nothing written" sh -c "grep -q 'stopped on a signal before training started: nothing written' '$TMP/err' && [ ! -e sc ] && [ ! -e sc.jsonl ]"
rc=$(fifo_term ck.fifo a/step-00000012.llmk llm-train --config run.yaml -o sr --resume ck.fifo --set train.max_steps=14 --metrics sr.jsonl)
check "SIGTERM while a checkpoint to resume from is read: exit 0 (got $rc)" [ "$rc" = 0 ]
check "... stopped once it is loaded, before step 13" sh -c "grep -q \"resuming from 'ck.fifo' (step 12)\" '$TMP/err' && grep -q 'stopped on a signal before training started: nothing written' '$TMP/err'"
check "... nothing written" sh -c "[ ! -e sr ] && [ ! -e sr.jsonl ]"

# ---- kill -9 during saves: the newest complete checkpoint always loads ----
cat >big.yaml <<Y
model: {n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 257, max_seq_len: 16}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 1, seq_len: 16, max_steps: 100000, save_every: 1, keep_last: 2, seed: 5, threads: 2}
Y
bad=0; tmps=0
for round in 1 2 3 4 5; do
  llm-train --config big.yaml -o k --resume auto -q --metrics k$round.jsonl 2>/dev/null &
  pid=$!
  # let it save at least once (a second step line follows the first save), then kill it
  # at a random moment: often in the middle of a save
  for i in $(seq 1 300); do sleep 0.1; [ "$(wc -l <k$round.jsonl 2>/dev/null)" -ge 2 ] 2>/dev/null && break; done
  sleep "0.$((RANDOM % 10))"
  kill -9 $pid; wait $pid 2>/dev/null
  newest=$(ls k/step-*.llmk 2>/dev/null | sort | tail -1)
  { [ -n "$newest" ] && verify "$newest"; } || bad=$((bad + 1))
  tmps=$((tmps + $(ls -A k | grep -c '\.tmp\.')))
done
check "kill -9 x5: the newest checkpoint always verifies ($bad bad)" [ $bad = 0 ]
newest=$(ls k/step-*.llmk | sort | tail -1); ns=$((10#$(basename "$newest" .llmk | cut -d- -f2)))
expect_exit "kill -9: resume auto loads the newest" 0 llm-train --config big.yaml -o k --resume auto --set train.max_steps=$((ns + 1)) --metrics k2.jsonl
check "kill -9: resumed from $newest" grep -q "resuming from '$newest'" "$TMP/err"
check "kill -9: no temp file left after a restart ($tmps seen after kills)" [ "$(ls -A k | grep -c '\.tmp\.')" = 0 ]

# ---- a full disk: clear message, previous checkpoint intact ----
disk() { # $1 = dir; sets FULL to how the disk is made full
  mkdir -p "$1"
  if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=2200k tmpfs "$1" 2>/dev/null; then FULL=tmpfs; else FULL=hook; fi
}
disk full
expect_exit "full disk: the first checkpoint fits" 0 llm-train --config run.yaml -o full --set train.max_steps=4 --set train.keep_last=0 --metrics /dev/null
sum1=$(cksum <full/step-00000004.llmk)
if [ $FULL = hook ]; then export LLM_FAULT_WRITE_LIMIT=100000; fi
expect_exit "full disk ($FULL): the final save fails with exit 74" 74 llm-train --config run.yaml -o full --resume auto --set train.max_steps=8 --set train.save_every=2 --set train.keep_last=0 --metrics /dev/null
unset LLM_FAULT_WRITE_LIMIT
check "full disk: message says so" grep -q "checkpoint 'full/step-00000008.llmk' not written: .*no space left on device" "$TMP/err"
check "... once" [ "$(grep -c "step-00000008.llmk' not written" "$TMP/err")" = 1 ]
check "full disk: periodic failure did not stop the run" grep -q "step-00000006.llmk' not written" "$TMP/err"
check "full disk: previous checkpoint intact" [ "$(cksum <full/step-00000004.llmk)" = "$sum1" ]
check "full disk: it verifies" verify full/step-00000004.llmk
check "full disk: no partial or temp file" [ "$(ls -A full | grep -v '^lost+found$')" = step-00000004.llmk ]
[ $FULL = tmpfs ] && umount full

# ---- non-finite steps: skipped, counted, K in a row ends the run (exit 3) ----
LLM_TRAIN_FAULT_NAN=3 expect_exit "non-finite steps skipped, run completes" 0 llm-train --config run.yaml -o n --set train.max_steps=4 --set train.save_every=2 --set train.keep_last=0 --metrics n.jsonl
check "skipped counted" [ "$(grep -o '"skipped":[0-9]*' n.jsonl | tail -1)" = '"skipped":2' ]
check "skipped warned" grep -q "step 4: non-finite loss or gradient norm, update skipped (2 in a row)" "$TMP/err"
check "skipped steps leave weights unchanged" weights n/step-00000002.llmk n/step-00000004.llmk
LLM_TRAIN_FAULT_NAN=3 expect_exit "max_skips in a row: exit 3" 3 llm-train --config run.yaml -o n2 --set train.max_skips=2 --metrics n2.jsonl
check "max_skips: message" grep -q "2 non-finite steps in a row (train.max_skips): giving up at step 4" "$TMP/err"
# the count in a row survives a checkpoint: stopped after 2 of them, resumed, the run gives
# up at the step the straight one does (5), not 3 steps after the resume
LLM_TRAIN_FAULT_NAN=3 expect_exit "max_skips: a run stopped in the middle of skips" 0 llm-train --config run.yaml -o n3 --set train.max_skips=3 --set train.exit_after=4 --metrics /dev/null
LLM_TRAIN_FAULT_NAN=3 expect_exit "... resumed: exit 3" 3 llm-train --config run.yaml -o n3 --set train.max_skips=3 --resume auto --metrics /dev/null
check "... at the straight run's step 5" grep -q "3 non-finite steps in a row (train.max_skips): giving up at step 5" "$TMP/err"

# ---- stdout closed: stop quietly with a checkpoint ----
llm-train --config run.yaml -o p -q | head -2 >/dev/null
rc=${PIPESTATUS[0]}
check "closed stdout: exit 0 (got $rc) with a checkpoint" test "$rc" = 0 -a -n "$(ls p/step-*.llmk 2>/dev/null)"
echo "1..$_n"
