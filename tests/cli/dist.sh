#!/bin/bash
# Distributed llm-train under mpirun (CPU, MPI): 2 ranks x B=4 == 1 rank x B=8 == 1 rank x
# B=4 x 2 accumulation steps (losses and weights), with ZeRO-1 too; a checkpoint from 2
# ranks resumes on 1 and on 3 ranks and in either ZeRO stage; ZeRO-1 holds a shard of the
# optimizer state only (per-rank peak memory vs ZeRO-0 and vs llm-profile plan); the
# in-place reduce-scatter on 3 ranks (test_dist under mpirun); ZeRO-0's gradient
# all-reduce in buckets overlapped with the backward (train.bucket_mb) == one all-reduce
# after it (1e-6) on 2 and 3 ranks; a killed rank or a hung one ends the job non-zero
# within --dist-timeout, with and without buckets; SIGTERM to rank 0 only, to rank 1
# only (rank 0 says why it stops), or to
# scripts/mpirun-cpu.sh, stops every rank at the same step; ranks given different
# configs are refused before any work; a checkpoint of 1 rank with B=8 resumes on 2 ranks
# with B=2 (the same global batch split otherwise).
. "$(dirname "$0")/lib.sh"
mpi_suite "distributed tests" || exit 0
if ! llm-train --help 2>&1 | grep -q -- --dist-timeout; then skip "distributed tests" "llm-train without --dist-timeout"; exit 0; fi
cd "$TMP" || exit 1

$PY - "$DATA/tinyshakespeare/input.txt" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()[:200000]
with open('train.bin', 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, len(b), *([0] * 253)))
    f.write(struct.pack('<%dH' % len(b), *b))
PY
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 32, max_steps: 10, lr: 0.003, warmup_steps: 2, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1, grad_clip: 0.5}
Y
T=32
# a build without MPI refuses to run under mpirun (it would run N copies): skip then
if ! "${MPIRUN[@]}" -np 2 llm-train --config run.yaml -o probe --set train.max_steps=2 >/dev/null 2>probe.err; then
  if grep -q "this build has no MPI" probe.err; then
    ok "a build without MPI refuses mpirun with a message"
    skip "distributed tests" "llm-train built with MPI=0"; echo "1..$_n"; exit 0; fi
  notok "2 ranks start ($(tail -c 300 probe.err))"; echo "1..$_n"; exit 0; fi
one() { llm-train --config run.yaml "$@"; }
mp() { local n=$1; shift; "${MPIRUN[@]}" -np "$n" llm-train --config run.yaml "$@"; }
# ---- equivalence: 2 ranks x B4 == 1 x B8 == 1 x B4 x 2 accumulation, ZeRO-1 too ----
expect_exit "1 rank, B=8" 0 one -o s8 --set train.batch_size=8 --metrics s8.jsonl
expect_exit "1 rank, B=4 x 2 accumulation" 0 one -o s4 --set train.total_batch_tokens=$((8 * T)) --metrics s4.jsonl
expect_exit "2 ranks, B=4" 0 mp 2 -o dp --metrics dp.jsonl
check "rank 0 alone logs: 10 step lines" [ "$(grep -c '"loss"' dp.jsonl)" = 10 ]
expect_exit "2 ranks, B=4, ZeRO-1" 0 mp 2 -o z1 --set train.zero=1 --metrics z1.jsonl
check "B=4 x 2 accum == B=8 (losses 1e-5)" close s8.jsonl s4.jsonl
check "2 ranks == 1 rank B=8 (losses 1e-5)" close s8.jsonl dp.jsonl
check "2 ranks ZeRO-1 == 1 rank B=8 (losses 1e-5)" close s8.jsonl z1.jsonl
check "2 ranks == 1 rank: weights and moments after 10 steps" wclose s8/step-00000010.llmk dp/step-00000010.llmk
check "ZeRO-1 == 1 rank: weights and moments after 10 steps" wclose s8/step-00000010.llmk z1/step-00000010.llmk
check "B=4 x 2 accum == B=8: weights after 10 steps" wclose s8/step-00000010.llmk s4/step-00000010.llmk
check "one checkpoint from 2 ranks (rank 0 writes)" [ "$(ls dp)" = step-00000010.llmk ]
check "ZeRO-1 checkpoint verifies" llm-shard verify -q z1/step-00000010.llmk
# ---- ranks given different configs (MPMD: one --set per rank) are refused before any
# work, naming the key: else another lr trains silently wrong weights, another
# train.zero hangs until --dist-timeout, another model size crashes in a collective ----
mpmd() { local a=$1 b=$2; shift 2
  "${MPIRUN[@]}" -np 1 llm-train --config run.yaml "$@" --set "$a" : -np 1 llm-train --config run.yaml "$@" --set "$b"; }
for kv in "train.lr=0.003 train.lr=0.001" "train.zero=0 train.zero=1" "model.n_embd=32 model.n_embd=64"; do
  set -- $kv; k=${1%%=*}
  expect_exit "ranks with different $k: refused (65)" 65 mpmd "$1" "$2" -o "cfg-$k" --dist-timeout 20
  check "... the message names $k" grep -q "different configs: $k (" "$TMP/err"
  check "... nothing written" [ ! -e "cfg-$k" ]
done
expect_exit "ranks with different train.threads (a rank's own): runs" 0 mpmd train.threads=1 train.threads=2 -o cfgthr -q

UNITDIR=${UNITDIR:-$ROOT/build/tests}
if [ -x "$UNITDIR/test_dist" ]; then
  expect_exit "in-place reduce-scatter, iallreduce, bucketed step on 3 ranks (test_dist under mpirun)" 0 "${MPIRUN[@]}" -np 3 "$UNITDIR/test_dist"
  expect_exit "iallreduce, bucketed step on 2 ranks (test_dist under mpirun)" 0 "${MPIRUN[@]}" -np 2 "$UNITDIR/test_dist"
else
  skip "in-place reduce-scatter on 3 ranks" "no $UNITDIR/test_dist"
fi

# ---- overlap: buckets all-reduced during the backward == one all-reduce after it ----
# 0.02 MiB = 5242 floats: one bucket per layer (12704 floats) and one for the embeddings;
# with accumulation 2 (global batch 16 rows on 2 ranks) the last micro-batch's only
for n in 2 3; do
  expect_exit "$n ranks, ZeRO-0, no buckets (bucket_mb 0)" 0 mp $n -o nb$n --set train.bucket_mb=0 --set train.total_batch_tokens=$((8 * n * T)) --metrics nb$n.jsonl
  expect_exit "$n ranks, ZeRO-0, buckets of 0.02 MiB" 0 mp $n -o bk$n --set train.bucket_mb=0.02 --set train.total_batch_tokens=$((8 * n * T)) --metrics bk$n.jsonl
  check "$n ranks: bucketed == unbucketed (losses 1e-6)" close nb$n.jsonl bk$n.jsonl 1e-6
  check "$n ranks: bucketed == unbucketed (weights and moments)" wclose nb$n/step-00000010.llmk bk$n/step-00000010.llmk
done

# ---- save at step 10 on 2 ranks (ZeRO-1), resume on 1 and on 3 ranks ----
# global batch 12 rows of B=2: 2 ranks x 3 accum, 1 rank x 6, 3 ranks x 2
G=(--set train.batch_size=2 --set train.total_batch_tokens=$((12 * T)) --set train.max_steps=20)
expect_exit "reference: 20 steps on 2 ranks" 0 mp 2 -o ref "${G[@]}" --metrics ref.jsonl
expect_exit "2 ranks ZeRO-1 stop after 10 steps" 0 mp 2 -o half "${G[@]}" --set train.zero=1 --set train.exit_after=10 --metrics half.jsonl
check "checkpoint at step 10" test -f half/step-00000010.llmk
cp -r half r1; cp -r half r3
expect_exit "resume on 1 rank" 0 one -o r1 "${G[@]}" --resume auto --metrics r1.jsonl
expect_exit "resume on 3 ranks, ZeRO-1" 0 mp 3 -o r3 "${G[@]}" --set train.zero=1 --resume auto --metrics r3.jsonl
cat half.jsonl r1.jsonl >c1.jsonl; cat half.jsonl r3.jsonl >c3.jsonl
check "2 -> 1 rank: loss curve continues (1e-5)" close ref.jsonl c1.jsonl
check "2 -> 3 ranks: loss curve continues (1e-5)" close ref.jsonl c3.jsonl
check "3 ranks ZeRO-1: the gathered checkpoint verifies" llm-shard verify -q r3/step-00000020.llmk
check "3 ranks ZeRO-1 == 2 ranks ZeRO-0: weights and moments at step 20" wclose ref/step-00000020.llmk r3/step-00000020.llmk
# a ZeRO-0 checkpoint resumed with ZeRO-1 (each rank loads its slice of the moments)
cp -r dp d0; cp -r dp d1
expect_exit "ZeRO-0 checkpoint, resume on 2 ranks with ZeRO-0" 0 mp 2 -o d0 --set train.max_steps=12 --resume auto --metrics d0.jsonl
expect_exit "ZeRO-0 checkpoint, resume on 2 ranks with ZeRO-1" 0 mp 2 -o d1 --set train.max_steps=12 --set train.zero=1 --resume auto --metrics d1.jsonl
check "ZeRO-0 -> ZeRO-1: same losses (1e-5)" close d0.jsonl d1.jsonl
check "ZeRO-0 -> ZeRO-1: same weights and moments at step 12" wclose d0/step-00000012.llmk d1/step-00000012.llmk
expect_exit "resume with another global batch is refused" 65 one -o r1 --set train.batch_size=2 --set train.max_steps=30 --resume auto

# ---- a checkpoint of 1 rank with B=8 resumed on 2 ranks with B=2 x 2 accumulation steps ----
expect_exit "1 rank, B=8: stop after 5 steps" 0 one -o h8 --set train.batch_size=8 --set train.exit_after=5 --metrics h8.jsonl
cp -r h8 h2
expect_exit "... resumed on 2 ranks with B=2 (total_batch_tokens 8 x T)" 0 mp 2 -o h2 --set train.batch_size=2 --set train.total_batch_tokens=$((8 * T)) --resume auto --metrics h2.jsonl
check "... said so" grep -q "resuming with batch_size 2 (was 8): same global batch of 256 tokens (2 rank(s) x batch_size 2 x seq_len 32 x 2 accumulation step(s))" "$TMP/err"
cat h8.jsonl h2.jsonl >h82.jsonl
check "... the losses of 10 steps on 1 rank with B=8 (1e-5)" close s8.jsonl h82.jsonl
check "... its weights and moments at step 10" wclose s8/step-00000010.llmk h2/step-00000010.llmk
expect_exit "... on 2 ranks with B=2, total_batch_tokens unset: refused (65)" 65 mp 2 -o h8 --set train.batch_size=2 --resume auto
check "... naming what to set" grep -q "ranks x batch_size x seq_len = 2 x 2 x 32: set train.total_batch_tokens to 256 to go on" "$TMP/err"

# ---- ZeRO-1 memory: each rank holds half of the AdamW moments ----
# 12.8M parameters (the moments: 2 x 4 bytes x P = 103 MB whole), 2 steps and the final
# checkpoint (the gather), 2 ranks with ZeRO-0 and with ZeRO-1.  Every rank reports its
# peak of backend allocations (exact: what the planner predicts) and its peak RSS
# (LLM_TRAIN_MEMSTAT).  Asserted: each planner total within 10% of the measured
# allocations; the saving, allocated and RSS, at least 80% of the planner's
# (plan zero 0 - plan zero 1 = 4 x P bytes).  RSS is not asserted under the sanitizers
# (their shadow memory and quarantine).
cat >mem.yaml <<Y
model: {n_layer: 4, n_head: 4, n_embd: 512, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 2, seq_len: 64, max_steps: 2, lr: 0.001, warmup_steps: 1, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1}
Y
for z in 0 1; do
  llm-profile plan --config mem.yaml --gpus 2 --zero $z --device cpu --precision fp32 --json >plan$z.json
  expect_exit "memory: 2 ranks, ZeRO-$z, 12.8M parameters" 0 "${MPIRUN[@]}" -np 2 env LLM_TRAIN_MEMSTAT=1 llm-train --config mem.yaml -o mem$z --set train.zero=$z -q
  cp "$TMP/err" mem$z.err
done
check "memory: the ZeRO-1 checkpoint of 12.8M parameters verifies" llm-shard verify -q mem1/step-00000002.llmk
# verdicts "plan|alloc|rss 0|1" into mem.verdict; the numbers as TAP comments
$PY - >mem.verdict <<'PY'
import json, re, sys
plan = [json.load(open('plan%d.json' % z))['bytes']['total'] for z in (0, 1)]
meas = []
for z in (0, 1):
    d = {}
    for l in open('mem%d.err' % z):
        m = re.match(r'llm-train: rank (\d+)/2: peak memory (\d+) bytes allocated, (\d+) bytes RSS', l)
        if m: d[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    meas.append(d)
if any(sorted(d) != [0, 1] for d in meas):
    sys.stderr.write('# no memory line from every rank\n'); sys.exit(0)
want = plan[0] - plan[1]
v = {'plan': 1, 'alloc': 1, 'rss': 1}
for r in (0, 1):
    a = [meas[z][r][0] for z in (0, 1)]; s = [meas[z][r][1] for z in (0, 1)]
    sys.stderr.write('# rank %d: allocated %.1f -> %.1f MB (plan %.1f -> %.1f), RSS %.1f -> %.1f MB; '
                     'saving %.1f MB allocated, %.1f MB RSS, planned %.1f MB\n' % (r, a[0] / 1e6,
                     a[1] / 1e6, plan[0] / 1e6, plan[1] / 1e6, s[0] / 1e6, s[1] / 1e6,
                     (a[0] - a[1]) / 1e6, (s[0] - s[1]) / 1e6, want / 1e6))
    v['plan'] &= all(abs(a[z] - plan[z]) / a[z] < 0.10 for z in (0, 1))
    v['alloc'] &= a[0] - a[1] >= 0.8 * want
    v['rss'] &= s[0] - s[1] >= 0.8 * want
for k in v: print(k, int(v[k]))
PY
check "memory: llm-profile plan within 10% of each rank's allocated peak (ZeRO-0 and ZeRO-1)" grep -qx "plan 1" mem.verdict
check "memory: ZeRO-1 allocates >= 80% of the planned saving less per rank" grep -qx "alloc 1" mem.verdict
if [ -z "${LLM_SAN:-}" ]; then
  check "memory: ZeRO-1 peak RSS >= 80% of the planned saving lower per rank" grep -qx "rss 1" mem.verdict
else
  skip "memory: ZeRO-1 peak RSS saving" "RSS under sanitizers"
fi

LONG=(--set train.max_steps=100000 --set train.save_every=5 --set train.keep_last=2)

# ---- a rank dies: the job ends non-zero within the timeout; resume auto continues ----
# (buckets of 0.02 MiB: one per layer, all-reduced during the backward)
mp 2 -o kill "${LONG[@]}" --set train.bucket_mb=0.02 --dist-timeout 10 --metrics kill.jsonl >/dev/null 2>kill.err & job=$!
if wait_steps kill.jsonl 7 && r1=$(pid_of $job 1) && [ -n "$r1" ]; then
  t0=$(date +%s); kill -9 "$r1"; wait $job; rc=$?; dt=$(( $(date +%s) - t0 ))
  check "killed rank 1: job exits non-zero (rc $rc)" [ "$rc" != 0 ]
  check "within the 10 s timeout (+ slack): ${dt}s" [ "$dt" -le 20 ]
  last=$(ls kill | tail -1)
  expect_exit "resume auto after the crash" 0 one -o kill "${LONG[@]}" --set train.total_batch_tokens=$((8 * T)) --set train.max_steps=$(( 10#${last:5:8} + 2 )) --resume auto
  check "resumed from the last complete checkpoint ($last)" grep -q "resuming from 'kill/$last'" "$TMP/err"
else
  kill $job 2>/dev/null; wait $job; notok "kill test: run did not start ($(tail -c 300 kill.err))"
fi

# ---- a rank hangs (SIGSTOP): the watchdog ends the job within the timeout ----
# with buckets all-reduced during the backward (one per layer), and without (bucket_mb 0)
for bmb in 0.02 0; do
mp 2 -o hang$bmb "${LONG[@]}" --set train.bucket_mb=$bmb --dist-timeout 3 --metrics hang$bmb.jsonl >/dev/null 2>hang$bmb.err & job=$!
if wait_steps hang$bmb.jsonl 3 && r1=$(pid_of $job 1) && [ -n "$r1" ]; then
  t0=$(date +%s); kill -STOP "$r1"; wait $job; rc=$?; dt=$(( $(date +%s) - t0 ))
  check "bucket_mb $bmb: hung rank 1: job exits non-zero (rc $rc)" [ "$rc" != 0 ]
  check "bucket_mb $bmb: the watchdog names the collective" grep -q "did not complete within 3 s" hang$bmb.err
  check "bucket_mb $bmb: within the 3 s timeout (+ slack): ${dt}s" [ "$dt" -le 15 ]
else
  kill $job 2>/dev/null; wait $job; notok "hang test (bucket_mb $bmb): run did not start ($(tail -c 300 hang$bmb.err))"
fi
done

# ---- SIGTERM to rank 0 only: every rank stops at the same step, one checkpoint, exit 0 ----
mp 2 -o term "${LONG[@]}" --set train.save_every=100000 --set train.zero=1 --metrics term.jsonl >/dev/null 2>term.err & job=$!
sigterm_rank0 $job term term.jsonl llm-shard ""
# ---- SIGTERM to rank 1 only: the same, and rank 0 (the one voice) says why it stops ----
mp 2 -o term1 "${LONG[@]}" --set train.save_every=100000 --metrics term1.jsonl >/dev/null 2>term1.err & job=$!
if wait_steps term1.jsonl 3 && r1=$(pid_of $job 1) && [ -n "$r1" ]; then
  kill -TERM "$r1"; wait $job; rc=$?
  step=$(grep '"loss"' term1.jsonl | tail -1 | sed 's/.*"step": *\([0-9]*\).*/\1/')
  check "SIGTERM to rank 1 only: exit 0 (rc $rc)" [ "$rc" = 0 ]
  check "... one checkpoint, at the last logged step ($step)" [ "$(ls term1 | tr '\n' ' ')" = "$(printf 'step-%08d.llmk ' "$step")" ]
  check "... rank 0 says another rank was asked to stop" grep -q "stopping at step $step: another rank was asked to stop" term1.err
else
  kill $job 2>/dev/null; wait $job; notok "SIGTERM to rank 1: run did not start ($(tail -c 300 term1.err))"
fi
# ---- scripts/mpirun-cpu.sh: SIGTERM to the script stops every rank with one checkpoint
# (mpirun alone kills the ranks a second after a SIGTERM, mid-step: the script turns the
# stop signals into SIGUSR1, which mpirun hands on) ----
OMPI_MCA_btl=self,vader "$ROOT/scripts/mpirun-cpu.sh" 2 1 --config run.yaml -o wrap "${LONG[@]}" \
  --set train.save_every=100000 --metrics wrap.jsonl >/dev/null 2>wrap.err & job=$!
if wait_steps wrap.jsonl 3; then
  kill -TERM $job; wait $job; rc=$?
  step=$(grep '"loss"' wrap.jsonl | tail -1 | sed 's/.*"step": *\([0-9]*\).*/\1/')
  check "mpirun-cpu.sh: SIGTERM to the script: exit 0 (rc $rc)" [ "$rc" = 0 ]
  check "... one checkpoint, at the last logged step ($step)" [ "$(ls wrap | tr '\n' ' ')" = "$(printf 'step-%08d.llmk ' "$step")" ]
  check "... stopped on the signal (rank 0 says so)" [ "$(grep -c 'stopping at step' wrap.err)" -ge 1 ]
else
  kill $job 2>/dev/null; wait $job; notok "mpirun-cpu.sh run did not start ($(tail -c 300 wrap.err))"
fi
echo "1..$_n"
