#!/bin/bash
# Multi-GPU training on the CPU: the emulated build (make CUDA=emu, tests/emu) with NCCL
# emulated over MPI (tests/emu/nccl_emu.cpp: each mpirun rank one process with its
# emulated device, NCCL's collectives MPI's, and, as NCCL_CHECK_POINTERS=1 would, every
# buffer required to be device memory).  So common/dist_nccl.c and the device-memory
# paths of common/train_dist.c run, compared with one emulated device: 2 nccl ranks x B4
# == 1 cuda rank x B8 (ZeRO-0, ZeRO-1, gradient buckets overlapped with the backward,
# copies lagging: LLM_EMU_STREAMS=late, bf16, fp16); 3 ranks with unequal shards; a
# ZeRO-1 checkpoint of 2 ranks resumed on 1; tensor-parallel --eval on 2 devices;
# llm-bench's collectives on nccl; SIGTERM to rank 0 stopping both ranks at one step; a
# hung rank ending the job through the watchdog.
. "$(dirname "$0")/lib.sh"
no_leak_checks
E=$ROOT/build/emu/bin
# under make check (LLM_SAN): the sanitized emulated build, where ASan sees every access
# of the emulated NCCL and of the staging of host buffers
[ "${LLM_SAN:-0}" = 1 ] && E=$ROOT/build/san/emu/bin
if ! have_data tinyshakespeare/input.txt; then skip "emulated NCCL" "no $DATA/tinyshakespeare"; exit 0; fi
if ! command -v mpirun >/dev/null; then skip "emulated NCCL" "mpirun not installed"; exit 0; fi
if [ ! -x "$E/llm-train" ] || ! grep -q 'NCCL=emu' "$E/../dist.flags" 2>/dev/null; then
  skip "emulated NCCL" "not built (make CUDA=emu with MPI; make test builds it unless EMU=0)"; exit 0
fi
cd "$TMP" || exit 1
MPIRUN=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
tiny_data 200000 0 ev.bin:2048
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 32, max_steps: 8, lr: 0.003, warmup_steps: 2, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1, grad_clip: 0.5, device: cuda}
Y
T=32
one() { "$E/llm-train" --config run.yaml "$@"; }
mp() { local n=$1; shift; "${MPIRUN[@]}" -np "$n" "$E/llm-train" --config run.yaml "$@"; }

expect_exit "1 rank on cuda, B=8" 0 one -o s8 --set train.batch_size=8 --metrics s8.jsonl
expect_exit "2 ranks on nccl, B=4" 0 mp 2 -o dp -v --metrics dp.jsonl
check "... the collectives are nccl's" grep -q "2 ranks (nccl)" "$TMP/err"
check "2 ranks nccl == 1 rank cuda (losses 1e-5)" close s8.jsonl dp.jsonl
expect_exit "2 ranks on nccl, ZeRO-1" 0 mp 2 -o z1 --set train.zero=1 --metrics z1.jsonl
check "ZeRO-1 == 1 rank (losses 1e-5)" close s8.jsonl z1.jsonl
check "... its gathered checkpoint == ZeRO-0's (weights and moments)" wclose dp/step-00000008.llmk z1/step-00000008.llmk
# 3 ranks: shards of unequal size (the reduce-scatter as grouped ncclReduce calls)
expect_exit "3 ranks on nccl, ZeRO-1" 0 mp 3 -o z3 --set train.zero=1 --metrics z3.jsonl
expect_exit "1 rank on cuda, B=12" 0 one -o s12 --set train.batch_size=12 --metrics s12.jsonl
check "3 ranks ZeRO-1 == 1 rank (losses 1e-5)" close s12.jsonl z3.jsonl
# one bucket per layer, all-reduced on NCCL's stream while the backward goes on
expect_exit "2 ranks, gradient buckets of 0.02 MiB" 0 mp 2 -o bk --set train.bucket_mb=0.02 --metrics bk.jsonl
check "bucketed == 1 rank (losses 1e-5)" close s8.jsonl bk.jsonl
expect_exit "2 ranks, buckets, copies lagging (LLM_EMU_STREAMS=late)" 0 \
  env LLM_EMU_STREAMS=late "${MPIRUN[@]}" -x LLM_EMU_STREAMS -np 2 "$E/llm-train" --config run.yaml \
  -o late --set train.bucket_mb=0.02 --metrics late.jsonl
check "... == 1 rank (losses 1e-5)" close s8.jsonl late.jsonl
expect_exit "2 ranks, bf16" 0 mp 2 -o b2 --precision bf16 --metrics b2.jsonl
expect_exit "1 rank, bf16, B=8" 0 one -o b1 --precision bf16 --set train.batch_size=8 --metrics b1.jsonl
check "bf16: 2 ranks == 1 rank (losses 1e-3: other summation orders, bf16 roundings)" close b1.jsonl b2.jsonl 1e-3
expect_exit "2 ranks, fp16 (dynamic loss scale)" 0 mp 2 -o h2 --precision fp16 --metrics h2.jsonl
expect_exit "1 rank, fp16, B=8" 0 one -o h1 --precision fp16 --set train.batch_size=8 --metrics h1.jsonl
check "fp16: 2 ranks == 1 rank (losses 1e-3)" close h1.jsonl h2.jsonl 1e-3
# a ZeRO-1 checkpoint of 2 nccl ranks (moments gathered from device memory), resumed on 1
expect_exit "2 ranks ZeRO-1 stop after 4 steps" 0 mp 2 -o half --set train.zero=1 --set train.exit_after=4 --metrics half.jsonl
expect_exit "... resumed on 1 cuda rank, B=4 x 2 accumulation" 0 one -o half \
  --set train.total_batch_tokens=$((8 * T)) --resume auto --metrics rest.jsonl
cat half.jsonl rest.jsonl >cont.jsonl
check "... the loss curve continues (1e-5)" close s8.jsonl cont.jsonl
# llm-bench's collectives on nccl: the four on 2 ranks, and allreduce on one rank (a
# communicator of one device); every row's result checked by llm-bench
for c in allreduce allgather reducescatter broadcast; do
  expect_exit "llm-bench $c on nccl, 2 ranks" 0 "${MPIRUN[@]}" -np 2 "$E/llm-bench" $c \
    -d cuda -b 4K -e 1M -f 16 -r 2 -w 1 -F jsonl
  cp "$TMP/out" $c.jsonl
done
expect_exit "llm-bench allreduce on nccl, 1 rank" 0 "$E/llm-bench" allreduce -d cuda -b 4K -e 4K -r 2 -w 1 -F jsonl
cp "$TMP/out" ar1.jsonl
"${PY:-python3}" - allreduce.jsonl allgather.jsonl reducescatter.jsonl broadcast.jsonl ar1.jsonl <<'PY' && ok "... their rows: nccl, in- and out-of-place, results checked" || notok "llm-bench rows on nccl (emu)"
import json, sys
for path in sys.argv[1:]:
    world, n = (1, 2) if path == 'ar1.jsonl' else (2, 6)
    rows = [json.loads(l) for l in open(path) if l.strip()]
    assert len(rows) == n, (path, len(rows))
    assert sorted(set(r['op'] for r in rows)) == ['in-place', 'out-of-place'], rows
    for r in rows:
        assert r['device'] == 'cuda' and r['ranks'] == world and r['wrong'] == 0, r
        assert 'nccl' in r['note'] and 'result checked' in r['note'], r
PY
# tensor-parallel inference on 2 emulated devices (its collectives: MPI on host copies)
"$E/llm-shard" split --tp 2 s8/step-00000008.llmk -o tp >/dev/null 2>&1
"$E/llm-infer" s8/step-00000008.llmk --device cuda --eval ev.bin --ctx 32 --stride 32 >e1 2>/dev/null
"${MPIRUN[@]}" -np 2 "$E/llm-infer" --shards tp --device cuda --eval ev.bin --ctx 32 --stride 32 >e2 2>e2.err
"${PY:-python3}" - e1 e2 <<'PY' && ok "TP=2 on cuda: --eval nll == the unsharded model's (1e-5)" || notok "TP=2 on cuda --eval ($(tail -c 200 e2.err))"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
print('# nll', a['nll'], b['nll'], 'tokens', a['tokens'])
assert a["tokens"] == b["tokens"] > 0, (a, b)
assert abs(a["nll"] - b["nll"]) <= 1e-5 * abs(a["nll"]), (a["nll"], b["nll"])
PY
# SIGTERM to rank 0 only, ZeRO-1 on nccl: both ranks agree to stop at the same step and
# write one checkpoint (the moments gathered from device memory), exit 0
LONG=(--set train.max_steps=100000 --set train.save_every=100000)
mp 2 -o term "${LONG[@]}" --set train.zero=1 --metrics term.jsonl >/dev/null 2>term.err & job=$!
sigterm_rank0 $job term term.jsonl "$E/llm-shard" "nccl: "
# a rank that hangs (SIGSTOP) while the other waits in a NCCL collective: the watchdog
# aborts the communicator (once: n_abort) and ends the job within the timeout
LONG=(--set train.max_steps=100000 --set train.save_every=100000 --set train.bucket_mb=0.02)
mp 2 -o hang "${LONG[@]}" --dist-timeout 3 --metrics hang.jsonl >/dev/null 2>hang.err & job=$!
if wait_steps hang.jsonl 3 && r1=$(pid_of $job 1) && [ -n "$r1" ]; then
  t0=$(date +%s); kill -STOP "$r1"; wait $job; rc=$?; dt=$(( $(date +%s) - t0 ))
  kill -9 "$r1" 2>/dev/null
  check "nccl: hung rank 1: the job exits non-zero (rc $rc)" [ "$rc" != 0 ]
  check "... the watchdog names the collective" grep -q "did not complete within 3 s" hang.err
  check "... within the 3 s timeout (+ slack): ${dt}s" [ "$dt" -le 15 ]
else
  kill $job 2>/dev/null; wait $job; notok "nccl hang test: run did not start ($(tail -c 300 hang.err))"
fi
echo "1..$_n"
