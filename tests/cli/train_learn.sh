#!/bin/bash
# llm-train learns: a tiny byte-level model on Tiny Shakespeare goes from ~ln(257) to a
# validation loss below 2.5 nats, and a 2-batch dataset is overfitted below 0.1.
. "$(dirname "$0")/lib.sh"
PY=python3
# other processes share the cores: let idle OpenMP threads sleep instead of spinning
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "learning tests" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1
tiny_data 0 0 two.bin:513
cat >learn.yaml <<Y
model: {n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, val: $TMP/val.bin, tokenizer: byte}
train: {batch_size: 16, seq_len: 64, max_steps: 260, lr: 0.005, warmup_steps: 20,
        eval_batches: 16, save_every: 100000, seed: 3, threads: 2}
Y
t0=$SECONDS
expect_exit "learning run" 0 llm-train --config learn.yaml -o learn --metrics learn.jsonl
$PY - learn.jsonl $((SECONDS - t0)) <<'PY' && ok "val loss from ~ln(257) to below 2.5" || notok "did not learn"
import json, math, sys
L = [json.loads(l) for l in open(sys.argv[1])]
first = [j["loss"] for j in L if "loss" in j][0]
val = [j["val_loss"] for j in L if "val_loss" in j][-1]
print(f"# first loss {first:.3f} (ln 257 = {math.log(257):.3f}), final val loss {val:.3f}, {sys.argv[2]} s")
assert abs(first - math.log(257)) < 0.3 and val < 2.5
PY
cat >over.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/two.bin, tokenizer: byte, sampling: sequential}
train: {batch_size: 4, seq_len: 64, max_steps: 120, lr: 0.01, warmup_steps: 10, weight_decay: 0,
        save_every: 100000, seed: 1, threads: 2}
Y
expect_exit "overfit run" 0 llm-train --config over.yaml -o over --metrics over.jsonl
$PY - over.jsonl <<'PY' && ok "2-batch dataset overfitted below 0.1" || notok "did not overfit"
import json, sys
L = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
print(f"# loss {L[0]:.3f} -> {L[-1]:.4f}")
assert L[-1] < 0.1
PY
echo "1..$_n"
