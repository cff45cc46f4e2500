#!/bin/bash
# Multi-GPU training launched without MPI, as torchrun or `srun` without an MPI plugin
# would start it: ranks from RANK/WORLD_SIZE/LOCAL_RANK, NCCL's unique id handed from rank 0
# to the others by --dist-init file:PATH or tcp://HOST:PORT (common/dist_xchg.c).  On the
# emulated build (make CUDA=emu): each rank one process with its emulated device, NCCL
# emulated without MPI (tests/emu/nccl_emu.cpp: the ranks of one id meet in a shared
# mapping).  2 ranks == 1 rank at twice the batch over a file and over TCP (ZeRO-0 and 1),
# llm-bench's collectives, SIGTERM to rank 0, a hung rank, a rank whose data read fails
# (every rank stops and saves, none waits for the timeout), the Slurm example's way (id
# file in a new output directory, SIGUSR1 to every rank, requeue), ranks that never
# start, a signal to a rank waiting for ranks that never start (two SIGINTs too), and
# llm-bench's collectives stopped by a signal the same way.
. "$(dirname "$0")/lib.sh"
E=$ROOT/build/emu/bin
[ "${LLM_SAN:-0}" = 1 ] && E=$ROOT/build/san/emu/bin
if ! have_data tinyshakespeare/input.txt; then skip "NCCL without MPI" "no $DATA/tinyshakespeare"; exit 0; fi
if [ ! -x "$E/llm-train" ] || ! grep -q 'NCCL=emu' "$E/../dist.flags" 2>/dev/null; then
  skip "NCCL without MPI" "not built (make CUDA=emu with MPI; make test builds it unless EMU=0)"; exit 0
fi
cd "$TMP" || exit 1
# the emulated NCCL's segment files go to $TMPDIR: here, removed with the test's files
export TMPDIR=$TMP LLM_EMU_DEVICES=2
tiny_data 200000 0
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 32, max_steps: 8, lr: 0.003, warmup_steps: 2, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1, grad_clip: 0.5, device: cuda}
Y
one() { "$E/llm-train" --config run.yaml "$@"; }
port() { "${PY:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
leftovers() { ! ls "$TMP" | grep -q '^llm-emu-nccl-'; }

expect_exit "1 rank on cuda, B=8" 0 one -o s8 --set train.batch_size=8 --metrics s8.jsonl
expect_exit "2 ranks, id through a file" 0 envrun 2 "file:$TMP/id1" "$E/llm-train" --config run.yaml \
  -o fi -v --metrics fi.jsonl
check "... the collectives are nccl's" grep -q "2 ranks (nccl)" "$TMP/err"
check "... == 1 rank (losses 1e-5)" close s8.jsonl fi.jsonl
check "... one checkpoint, which verifies" "$E/llm-shard" verify -q fi/step-00000008.llmk
check "... no segment file left" leftovers
check "... rank 0 removed the id file once every rank had joined" [ ! -e id1 ]
: >stale.id
expect_exit "an id file that exists (a stale one): rank 0 exits 64" 64 envrun 2 "file:$TMP/stale.id" \
  "$E/llm-train" --config run.yaml -o st --dist-timeout 5
check "... says why" grep -q "stale.id' exists" "$TMP/err"
expect_exit "2 ranks, id over TCP, ZeRO-1" 0 envrun 2 "tcp://127.0.0.1:$(port)" "$E/llm-train" \
  --config run.yaml -o tz --set train.zero=1 --metrics tz.jsonl
check "... == 1 rank (losses 1e-5)" close s8.jsonl tz.jsonl
check "... its gathered checkpoint == the file run's (weights and moments)" wclose fi/step-00000008.llmk tz/step-00000008.llmk
expect_exit "3 ranks, ZeRO-1, buckets of 0.02 MiB" 0 envrun 3 "file:$TMP/id3" "$E/llm-train" \
  --config run.yaml -o z3 --set train.zero=1 --set train.bucket_mb=0.02 --metrics z3.jsonl
expect_exit "1 rank on cuda, B=12" 0 one -o s12 --set train.batch_size=12 --metrics s12.jsonl
check "... == 1 rank (losses 1e-5)" close s12.jsonl z3.jsonl
LLM_EMU_STREAMS=late expect_exit "2 ranks, buckets on NCCL's stream, copies lagging (LLM_EMU_STREAMS=late)" 0 \
  envrun 2 "file:$TMP/idl" "$E/llm-train" --config run.yaml -o late --set train.bucket_mb=0.02 --metrics late.jsonl
check "... == 1 rank (losses 1e-5)" close s8.jsonl late.jsonl
# llm-bench's collectives over the same launch (every result checked by llm-bench)
for c in allreduce reducescatter; do
  expect_exit "llm-bench $c, 2 ranks without MPI" 0 envrun 2 "file:$TMP/b$c" "$E/llm-bench" $c \
    -d cuda -b 4K -e 4M -f 32 -r 2 -w 1 -F jsonl
  check "... rows for 2 ranks, none wrong" "${PY:-python3}" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(rows) >= 4 and all(r["ranks"] == 2 and r["wrong"] == 0 and "nccl" in r["note"] for r in rows), rows' "$TMP/out"
done
# SIGTERM to rank 0 only: the ranks agree to stop at one step, one checkpoint, exit 0
LONG=(--set train.max_steps=100000 --set train.save_every=100000)
envrun 2 "file:$TMP/idt" "$E/llm-train" --config run.yaml -o term "${LONG[@]}" --set train.zero=1 \
  --metrics term.jsonl >/dev/null 2>term.err & job=$!
sigterm_rank0 $job term term.jsonl "$E/llm-shard" "no MPI: "
# a rank that hangs (SIGSTOP): the other, waiting in a collective, ends within the timeout
envrun 2 "file:$TMP/idh" "$E/llm-train" --config run.yaml -o hang "${LONG[@]}" --dist-timeout 3 \
  --metrics hang.jsonl >/dev/null 2>hang.err & job=$!
if wait_steps hang.jsonl 3 && r1=$(pid_of $job 1) && [ -n "$r1" ]; then
  t0=$(date +%s); kill -STOP "$r1"; wait $job; rc=$?; dt=$(( $(date +%s) - t0 ))
  check "no MPI: hung rank 1: rank 0 exits 70 (rc $rc)" [ "$rc" = 70 ]
  check "... the watchdog names the collective" grep -q "did not complete within 3 s" hang.err
  check "... within the 3 s timeout (+ slack): ${dt}s" [ "$dt" -le 15 ]
else
  kill $job 2>/dev/null; wait $job; notok "no MPI hang test: run did not start ($(tail -c 300 hang.err))"
fi
# a rank that cannot read a step's batches (LLM_TRAIN_FAULT=data:5 on rank 1 only): with no
# launcher to end the job, a rank left in a collective would wait for --dist-timeout (exit
# 70); every rank stops before the step instead, they save step 4 together, exit 65
expect_exit "no MPI: rank 1's read of step 5 fails: rank 0 exits 65, without waiting for --dist-timeout" 65 \
  envrun 2 "file:$TMP/idd" sh -c '[ "$RANK" = 1 ] && export LLM_TRAIN_FAULT=data:5; exec "$@"' sh \
  "$E/llm-train" --config run.yaml -o dat --dist-timeout 30 --metrics dat.jsonl
check "... no collective timed out" sh -c "! grep -q 'did not complete within' '$TMP/err'"
check "... rank 0 names rank 1, step 4 saved" grep -q "step 5: rank 1 could not read the step's batches (its own error says why) (the state after step 4, the last complete one, is saved in 'dat/step-00000004.llmk')$" "$TMP/err"
check "... no segment file left" leftovers
expect_exit "... resumed on 2 ranks" 0 envrun 2 "file:$TMP/idd2" "$E/llm-train" --config run.yaml -o dat \
  --resume auto --metrics datr.jsonl
cat dat.jsonl datr.jsonl >datc.jsonl
check "... the uninterrupted run's losses (1e-5)" close fi.jsonl datc.jsonl
# rank 1's device fails in step 3's update (LLM_EMU_FAULT on rank 1 only), after rank 0
# saved step 2: rank 1 saves nothing and cannot know whether rank 0's save succeeded, but
# it must not call step 2 the checkpoint this (fresh) run started from.  Rank 0's end
# is not checked here (an emulated peer's abort).
envrun 2 "file:$TMP/idv" sh -c '[ "$RANK" = 1 ] && export LLM_EMU_FAULT=launch:3:lc_adamw; exec "$@"' \
  sh "$E/llm-train" --config run.yaml -o dv --set train.save_every=2 --dist-timeout 30 >/dev/null 2>dv.err
check "rank 1's device fails in step 3: rank 1 names the checkpoint rank 0 wrote ($(grep "failed by the end" dv.err | tail -c 300))" grep -q \
  "^llm-train: device 'cuda' failed by the end of step 3: CUDA device 1: .*; nothing is saved: resume from the newest checkpoint in 'dv' (rank 0 wrote the last one, of step 2, unless it said that save failed)\$" dv.err
check "... and does not call it the one the run started from" sh -c "! grep -q 'this run started from' dv.err"
# scripts/slurm/1node-8gpu.sbatch's way, as srun starts it: ranks from SLURM_PROCID/
# SLURM_NTASKS/SLURM_LOCALID, the id file inside an output directory that does not exist
# yet (the job's first run), the time-limit signal (SIGUSR1) to every rank, then the
# requeued job resuming from the checkpoint
srun_like() { local n=$1 r p x rc=0 pids=(); shift
  for ((r = 0; r < n; r++)); do
    env SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r "$@" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; x=$?; [ "$rc" = 0 ] && rc=$x; done
  return "$rc"
}
OUT=$TMP/runs/job
srun_like 2 "$E/llm-train" --config run.yaml -o "$OUT" "${LONG[@]}" --resume auto \
  --dist-init "file:$OUT/.nccl-id.1.0" --metrics q1.jsonl >/dev/null 2>q1.err & job=$!
if wait_steps q1.jsonl 3 && r0=$(pid_of $job 0) && r1=$(pid_of $job 1) && [ -n "$r0" ] && [ -n "$r1" ]; then
  kill -USR1 "$r0" "$r1"; wait $job; rc=$?
  check "srun-like: SIGUSR1 to every rank: exit 0 (rc $rc)" [ "$rc" = 0 ]
  stop=$(grep '"loss"' q1.jsonl | tail -1 | sed 's/.*"step": *\([0-9]*\).*/\1/')
  check "... one checkpoint, at the last logged step ($stop)" [ "$(ls "$OUT" | tr '\n' ' ')" = "$(printf 'step-%08d.llmk ' "$stop")" ]
  expect_exit "... requeued: resumes and runs 3 more steps" 0 srun_like 2 "$E/llm-train" \
    --config run.yaml -o "$OUT" "${LONG[@]}" --resume auto --set train.exit_after=3 \
    --dist-init "file:$OUT/.nccl-id.1.1" --metrics q2.jsonl
  expect_exit "1 rank, B=8, the same $((stop + 3)) steps" 0 one -o qs "${LONG[@]}" \
    --set train.batch_size=8 --set train.exit_after=$((stop + 3)) --metrics qs.jsonl
  cat q1.jsonl q2.jsonl >q.jsonl
  check "... the interrupted curve == 1 rank's (losses 1e-5)" close qs.jsonl q.jsonl
else
  kill $job 2>/dev/null; wait $job; notok "srun-like run did not start ($(tail -c 300 q1.err))"
fi
# ranks that never start: rank 0 alone waits in NCCL's setup, rank 1 alone for the id
t0=$(date +%s)
expect_exit "rank 0 of 2 alone: exit 70 after --dist-timeout" 70 env RANK=0 WORLD_SIZE=2 \
  "$E/llm-train" --config run.yaml -o a0 --dist-init "file:$TMP/ida" --dist-timeout 3
dt=$(( $(date +%s) - t0 ))
check "... the watchdog names NCCL's setup (${dt}s)" grep -q "ncclCommInitRank.*did not complete within 3 s" "$TMP/err"
check "... and wrote no checkpoint" [ ! -e a0 ]
check "... and removed its id file" [ ! -e ida ]
expect_exit "rank 1 of 2 alone: no id within --dist-timeout, exit 74" 74 env RANK=1 WORLD_SIZE=2 \
  "$E/llm-train" --config run.yaml -o a1 --dist-init "file:$TMP/idb" --dist-timeout 2
check "... says what it waited for" grep -q "idb" "$TMP/err"
# a signal to a rank that waits for the others at the start (they never come): it stops
# there, long before --dist-timeout (30 s), with exit 0 and nothing written, as a signal
# before the first step does; rank 0 leaves no id file (unit/test_dist: nor a listening
# port).
# alone NAME SIG RANK INIT WHAT: rank RANK of 2 started alone, SIG once it is past reading
# its config (-v says "device cuda" just before the ranks meet) and a second into the wait;
# WHAT: how its message goes on after "stopped on a signal during the start-up, waiting "
alone() { local name=$1 sig=$2 rank=$3 init=$4 what=$5 pid rc t0 dt
  env RANK="$rank" WORLD_SIZE=2 LOCAL_RANK="$rank" "$E/llm-train" --config run.yaml -o "al$rank" \
    -v --dist-init "$init" --dist-timeout 30 >/dev/null 2>al.err & pid=$!
  for _ in $(seq 300); do grep -q "device cuda" al.err && break; sleep 0.1; done
  sleep 1
  t0=$(date +%s); kill -"$sig" "$pid"; wait "$pid"; rc=$?; dt=$(( $(date +%s) - t0 ))
  check "$name: exit 0 (rc $rc)" [ "$rc" = 0 ]
  check "... within 10 s, not at the 30 s timeout (${dt}s)" [ "$dt" -le 10 ]
  check "... says what it waited for" grep -qF "stopped on a signal during the start-up, waiting $what" al.err
  check "... wrote nothing" [ ! -e "al$rank" ]
}
alone "SIGTERM to rank 1 of 2 waiting for the id file" TERM 1 "file:$TMP/idw" \
  "for rank 0's id in '$TMP/idw': nothing written"
p=$(port)
alone "SIGTERM to rank 0 of 2 waiting over TCP for rank 1" TERM 0 "tcp://127.0.0.1:$p" \
  "for rank 1 at port $p (1 of 2 joined): nothing written"
alone "SIGTERM to rank 1 of 2 waiting over TCP for rank 0" TERM 1 "tcp://127.0.0.1:$p" \
  "for rank 0 at tcp://127.0.0.1:$p: nothing written"
alone "SIGINT to rank 0 of 2 in NCCL's setup (id through a file)" INT 0 "file:$TMP/idz" \
  "in ncclCommInitRank"
check "... rank 0 removed the id file it wrote" [ ! -e idz ]
# rank 0 of 2 started alone, in NCCL's setup once its id file appeared, sent signals
# rank0 SIGS FILE CMD...: SIGS e.g. TERM, or INT,INT (the second sent once the first has
# been taken: no longer pending); sets rc
int_pending() { local v; v=$(awk '/^ShdPnd:/ {print $2}' "/proc/$1/status" 2>/dev/null)
  [ -n "$v" ] && (( 0x$v & 2 )); }
rank0() { local sigs=$1 file=$2 pid s n=0; shift 2
  env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "$@" >/dev/null 2>r0.err & pid=$!
  for _ in $(seq 300); do [ -e "$file" ] && break; sleep 0.1; done
  sleep 1
  for s in ${sigs//,/ }; do
    [ $((n++)) = 0 ] || for _ in $(seq 500); do int_pending "$pid" || break; done
    kill -"$s" "$pid"
  done
  wait "$pid"; rc=$?
}
# twice NAME FILE CMD...: two SIGINTs back to back: the second ends the process at once
# (130) and takes the id file with it.  The watchdog answers the first within 0.2 s (exit
# 0, the file removed as above), which may come before the second on a loaded machine: up
# to 6 tries for a run that the second SIGINT ends.
twice() { local name=$1 file=$2 k; shift 2
  for k in 1 2 3 4 5 6; do
    rm -f "$file"; rank0 INT,INT "$file" "$@"
    [ "$rc" = 130 ] || [ -e "$file" ] && break
  done
  check "$name: the second exits 130 at once (rc $rc, try $k)" [ "$rc" = 130 ]
  check "... and rank 0's id file is gone" [ ! -e "$file" ]
}
twice "two SIGINTs to rank 0 in NCCL's setup" "$TMP/idi" "$E/llm-train" --config run.yaml \
  -o i2 --dist-init "file:$TMP/idi" --dist-timeout 30
check "... wrote nothing" [ ! -e i2 ]
# llm-bench's collectives the same way: a signal while the ranks meet ends the wait
rank0 TERM "$TMP/bt" "$E/llm-bench" allreduce -d cuda -b 4K -e 4K --dist-init "file:$TMP/bt" \
  --dist-timeout 30
check "llm-bench: SIGTERM to rank 0 in NCCL's setup: exit 0 (rc $rc)" [ "$rc" = 0 ]
check "... says so" grep -q "stopped on a signal during the start-up, waiting in ncclCommInitRank" r0.err
check "... and removed its id file" [ ! -e bt ]
twice "llm-bench: two SIGINTs to rank 0 in NCCL's setup" "$TMP/bi" "$E/llm-bench" allreduce \
  -d cuda -b 4K -e 4K --dist-init "file:$TMP/bi" --dist-timeout 30
echo "1..$_n"
