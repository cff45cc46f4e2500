#!/bin/bash
# Distributed llm-train under mpirun (CPU, MPI): a rank whose read of a step's batches fails
# (LLM_TRAIN_FAULT=data:N given to that rank only, as bad data or a file cut short under the
# job would) stops every rank before the step's computation: no rank waits in a collective
# until --dist-timeout; every rank takes part in saving the last complete step (ZeRO-1:
# rank 0 gathers the moments' shards), rank 0 writes it; the failing rank says its error,
# the others name it, every rank exits 65.  The checkpoint is the one a straight run has
# at that step (weights, moments and data position): a resume continues the uninterrupted
# run's losses (1e-5), with gradient buckets overlapped with the backward and accumulation
# 2 per rank.  A failure in step 1 saves nothing; one right after a periodic checkpoint
# writes none again.  More than 1 GiB of batches read ahead per rank is refused.
. "$(dirname "$0")/lib.sh"
mpi_suite "distributed data errors" || exit 0
cd "$TMP" || exit 1
tiny_data 200000 1000
T=32
# 2 ranks x 2 micro-batches of 4 x 32 tokens a step; buckets of 0.02 MiB (one per layer)
# all-reduced during the last micro-batch's backward
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 32, max_steps: 10, lr: 0.003, warmup_steps: 2, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1, grad_clip: 0.5, total_batch_tokens: $((16 * T)),
        bucket_mb: 0.02}
Y
if ! "${MPIRUN[@]}" -np 2 llm-train --config run.yaml -o probe --set train.max_steps=1 -q >/dev/null 2>probe.err; then
  if grep -q "this build has no MPI" probe.err; then
    skip "distributed data errors" "llm-train built with MPI=0"; echo "1..$_n"; exit 0; fi
  notok "2 ranks start ($(tail -c 300 probe.err))"; echo "1..$_n"; exit 0; fi
mp() { "${MPIRUN[@]}" -np 2 llm-train --config run.yaml "$@"; }
# fault RANK SPEC ARGS...: 2 ranks, LLM_TRAIN_FAULT=SPEC on rank RANK only (MPMD), a short
# --dist-timeout: a rank left waiting in a collective ends the job with 70, not 65
fault() { local r=$1 spec=$2 a=() b=(); shift 2
  if [ "$r" = 0 ]; then a=(env LLM_TRAIN_FAULT="$spec"); else b=(env LLM_TRAIN_FAULT="$spec"); fi
  "${MPIRUN[@]}" -np 1 "${a[@]}" llm-train --config run.yaml --dist-timeout 20 "$@" : \
    -np 1 "${b[@]}" llm-train --config run.yaml --dist-timeout 20 "$@"; }

expect_exit "reference: 10 steps on 2 ranks" 0 mp -o ref --metrics ref.jsonl -q
expect_exit "reference: 5 steps on 2 ranks" 0 mp -o ref5 --set train.exit_after=5 --metrics /dev/null -q

# ---- rank 1 cannot read step 6's batches ----
expect_exit "rank 1's read of step 6 fails: every rank exits 65, none waits for --dist-timeout" 65 fault 1 data:6 -o f1 --metrics f1.jsonl
cp "$TMP/err" f1.err
check "... no collective timed out" sh -c "! grep -q 'did not complete within' f1.err"
check "... rank 1 says its error, with the checkpoint saved" grep -q "step 6: bad data (test hook LLM_TRAIN_FAULT=data:6) (the state after step 5, the last complete one, is saved in 'f1/step-00000005.llmk')$" f1.err
check "... rank 0 names rank 1" grep -q "llm-train: step 6: rank 1 could not read the step's batches (its own error says why) (the state after step 5, the last complete one, is saved in 'f1/step-00000005.llmk')$" f1.err
check "... step 5 is saved, nothing else" [ "$(ls f1 2>/dev/null)" = step-00000005.llmk ]
check "... the metrics end at step 5" [ "$(grep -c '"loss"' f1.jsonl)" = 5 ]
check "... the weights and moments of 5 steps" wclose ref5/step-00000005.llmk f1/step-00000005.llmk
# the train section of a checkpoint but its config (exit_after differs)
trainsec() { llm-shard info "$1" | sed -n '/^train:/,/^  config:/p'; }
check "... and its train section (step, data position)" diff <(trainsec ref5/step-00000005.llmk) <(trainsec f1/step-00000005.llmk)
expect_exit "... resumed on 2 ranks" 0 mp -o f1 --resume auto --metrics f1r.jsonl -q
cat f1.jsonl f1r.jsonl >f1c.jsonl
check "... the uninterrupted run's losses (1e-5)" close ref.jsonl f1c.jsonl
check "... and its weights and moments at step 10" wclose ref/step-00000010.llmk f1/step-00000010.llmk

# ---- ZeRO-1: the save gathers the moments' shards (collectives) after rank 0's read failed ----
expect_exit "ZeRO-1, rank 0's read of step 4 fails: exit 65" 65 fault 0 data:4 -o z0 --set train.zero=1 --metrics z0.jsonl
cp "$TMP/err" z0.err
check "... no collective timed out" sh -c "! grep -q 'did not complete within' z0.err"
check "... rank 1 names rank 0" grep -q "llm-train: step 4: rank 0 could not read the step's batches (its own error says why) (the state after step 3, the last complete one, is saved in 'z0/step-00000003.llmk')$" z0.err
check "... step 3 is saved, whole" sh -c "[ \"\$(ls z0 2>/dev/null)\" = step-00000003.llmk ] && llm-shard verify -q z0/step-00000003.llmk"
expect_exit "... resumed on 2 ranks with ZeRO-1" 0 mp -o z0 --set train.zero=1 --resume auto --metrics z0r.jsonl -q
cat z0.jsonl z0r.jsonl >z0c.jsonl
check "... the uninterrupted run's losses (1e-5)" close ref.jsonl z0c.jsonl
check "... and its weights and moments at step 10" wclose ref/step-00000010.llmk z0/step-00000010.llmk

# ---- nothing to save: no complete step, or its checkpoint written already ----
expect_exit "rank 1's read of step 1 fails: exit 65" 65 fault 1 data:1 -o s1 --metrics /dev/null
check "... nothing saved, no collective timed out" sh -c "[ -z \"\$(ls -A s1 2>/dev/null)\" ] && ! grep -q 'did not complete within' '$TMP/err' && ! grep -q 'last complete' '$TMP/err'"
expect_exit "rank 1's read of step 5 fails after the checkpoint of step 4: exit 65" 65 fault 1 data:5 -o s4 --set train.save_every=4 --metrics /dev/null
check "... that checkpoint only, nothing more said" sh -c "[ \"\$(ls s4)\" = step-00000004.llmk ] && ! grep -q 'did not complete within' '$TMP/err' && ! grep -q 'last complete' '$TMP/err'"

# ---- the batches read ahead are bounded: a rank's share of a step over 1 GiB (8 bytes a
# token) is refused at the start (timeout: a build without the bound trains 2^20
# micro-batches a step) ----
expect_exit "a share of 2^27 + 128 tokens a step per rank (over 1 GiB read ahead): refused, 65" 65 timeout 120 "${MPIRUN[@]}" -np 2 llm-train --config run.yaml -o big --set train.total_batch_tokens=$(( (1 << 28) + 256 )) --set train.max_steps=1 --metrics /dev/null
check "... naming train.total_batch_tokens and the bound" grep -q "'train.total_batch_tokens': a rank reads its share of a step (1048577 micro-batch(es) of 4 x 32 tokens) before the step starts, 1073742848 bytes of inputs and targets, more than the 1024 MiB allowed" "$TMP/err"
check "... said once, by rank 0 (every rank finds it in the agreed config)" test "$(grep -c "a rank reads its share" "$TMP/err")" = 1
check "... nothing written" [ ! -e big ]
echo "1..$_n"
