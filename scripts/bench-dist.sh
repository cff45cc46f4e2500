#!/bin/bash
# 1 -> 2 rank scaling of llm-train on the CPU (1 thread per rank, same global batch):
#   scripts/bench-dist.sh [STEPS]   (needs bin/llm-train built with MPI, and mpirun)
# Prints tokens/s (median over the steps after the first two) for 1 rank x B=16 and
# 2 ranks x B=8, ZeRO 0 and 1, and the speed-up; then ZeRO-0's step time with the
# gradient all-reduce after the backward (train.bucket_mb=0) and overlapped with it in
# buckets of one layer (bucket_mb=0.5: a layer is 0.76 MiB), alternating, ROUNDS times
# (OVERLAP_ROUNDS, default 3).  Timings are noisy on a shared machine: the load average
# is printed.
set -euo pipefail
STEPS=${1:-12}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${LLMKIT_DATA:-$ROOT/../shared/data}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 - "$DATA/tinyshakespeare/input.txt" "$T/train.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
with open(sys.argv[2], 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, len(b), *([0] * 253)))
    f.write(struct.pack('<%dH' % len(b), *b))
PY
cat >"$T/run.yaml" <<Y
model: {n_layer: 4, n_head: 4, n_embd: 128, vocab_size: 257, max_seq_len: 128}
data: {train: $T/train.bin, tokenizer: byte}
train: {batch_size: 16, seq_len: 128, max_steps: $STEPS, lr: 0.003, save_every: 100000, keep_last: 1, threads: 1, device: cpu}
Y
MPI=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
med() { python3 -c "import json,sys,statistics; v=[json.loads(l)['tokens_per_s'] for l in open(sys.argv[1]) if 'loss' in l][2:]; print('%.0f' % statistics.median(v))" "$1"; }
export OMP_NUM_THREADS=1
"$ROOT/bin/llm-train" --config "$T/run.yaml" -o "$T/a" --metrics "$T/a.jsonl" 2>/dev/null
"${MPI[@]}" -np 2 "$ROOT/bin/llm-train" --config "$T/run.yaml" -o "$T/b" --set train.batch_size=8 --metrics "$T/b.jsonl" 2>/dev/null
"${MPI[@]}" -np 2 "$ROOT/bin/llm-train" --config "$T/run.yaml" -o "$T/c" --set train.batch_size=8 --set train.zero=1 --metrics "$T/c.jsonl" 2>/dev/null
a=$(med "$T/a.jsonl"); b=$(med "$T/b.jsonl"); c=$(med "$T/c.jsonl")
echo "1 rank  B=16      : $a tokens/s"
echo "2 ranks B=8       : $b tokens/s  (x$(python3 -c "print(round($b/$a,2))"))"
echo "2 ranks B=8 ZeRO-1: $c tokens/s  (x$(python3 -c "print(round($c/$a,2))"))"
# step time in ms (median): 16 x 128 tokens per step
ms() { python3 -c "import json,sys,statistics; v=[json.loads(l)['tokens_per_s'] for l in open(sys.argv[1]) if 'loss' in l][2:]; print('%.1f' % (2048e3 / statistics.median(v)))" "$1"; }
echo "load average before the overlap runs: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "${OVERLAP_ROUNDS:-3}"); do
  for mb in 0 0.5; do
    "${MPI[@]}" -np 2 "$ROOT/bin/llm-train" --config "$T/run.yaml" -o "$T/o$mb" --set train.batch_size=8 --set train.bucket_mb=$mb --metrics "$T/o$mb.jsonl" 2>/dev/null
  done
  echo "round $r: 2 ranks B=8 ZeRO-0 step: all-reduce after the backward $(ms "$T/o0.jsonl") ms, overlapped (buckets of 0.5 MiB) $(ms "$T/o0.5.jsonl") ms  (load $(cut -d' ' -f1 /proc/loadavg))"
done
