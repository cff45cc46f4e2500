#!/usr/bin/env bash
# bench-quant.sh — GPT-2 124M (random weights) with llm-infer at f32, q8_0 and q4_0:
# prefill tokens/s (128-token prompt) and decode tokens/s at batch 1; the time
# llm-quantize takes to write q8_0 and q4_0; file sizes against the theory
# (34 bytes per 32 weights for q8_0, 18 for q4_0, plus the f32 tensors left as they are).
# A benchmark, not a test: it prints one JSON line per measurement and never fails on
# a number.  Timings on a shared machine are noisy: compare formats within one run.
#
#   scripts/bench-quant.sh [-t THREADS] [-n DECODE_TOKENS] [-r ROUNDS] [-w WORKDIR]
#
# Needs bin/ built (make CUDA=0) and numpy for /usr/bin/python3 (to write the random
# llm.c checkpoint that `llm-shard convert --from llmc` turns into .llmk).
set -eu
THREADS=2 NDEC=64 ROUNDS=2 WORK=/tmp/llmkit-bench-quant
while getopts t:n:r:w: o; do
  case $o in t) THREADS=$OPTARG ;; n) NDEC=$OPTARG ;; r) ROUNDS=$OPTARG ;; w) WORK=$OPTARG ;;
  *) echo "usage: $0 [-t THREADS] [-n DECODE_TOKENS] [-r ROUNDS] [-w WORKDIR]" >&2; exit 64 ;; esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/bin
PY=/usr/bin/python3
mkdir -p "$WORK"
M=$WORK/gpt2_124m.llmk
if [ ! -f "$M" ]; then
  "$PY" -c "import numpy" 2>/dev/null ||
    { echo "$0: needs numpy for $PY (Debian: apt-get install python3-numpy)" >&2; exit 69; }
  "$PY" - "$WORK/gpt2_124m.bin" <<'PY'
import sys, numpy as np
L, NH, C, V, Vp, maxT = 12, 12, 768, 50257, 50304, 1024
h = np.zeros(256, "<i4"); h[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
a = np.random.default_rng(0).normal(0, 0.02, n).astype("<f4")
a[V * C:Vp * C] = 0
with open(sys.argv[1], "wb") as f:
    f.write(h.tobytes()); f.write(a.tobytes())
PY
  "$B/llm-shard" convert --from llmc "$WORK/gpt2_124m.bin" -o "$M" >/dev/null
  rm -f "$WORK/gpt2_124m.bin"
fi
echo "# $(date -u +%FT%TZ) threads=$THREADS decode=$NDEC rounds=$ROUNDS load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

for ty in q8_0 q4_0; do
  for r in $(seq 1 "$ROUNDS"); do
    t0=$(date +%s.%N)
    "$B/llm-quantize" "$M" "$WORK/gpt2_124m.$ty.llmk" --type "$ty" -j "$THREADS" -q
    t1=$(date +%s.%N)
    echo "{\"bench\":\"quantize\",\"type\":\"$ty\",\"round\":$r,\"threads\":$THREADS,\"seconds\":$(echo "$t1 - $t0" | bc)}"
  done
  "$B/llm-quantize" "$M" "$WORK/check.llmk" --type "$ty" --json -j "$THREADS" -q >"$WORK/$ty.json"
  "$PY" - "$WORK/$ty.json" "$WORK/gpt2_124m.$ty.llmk" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1])); per = {"q8_0": 34, "q4_0": 18}[r["type"]]
theory = sum(t["elements"] * per // 32 if t["action"] == "convert" else t["bytes_in"]
             for t in r["tensors"] if t["action"] != "drop")
size = os.path.getsize(sys.argv[2])
print(json.dumps({"bench": "size", "type": r["type"], "tensor_bytes": r["totals"]["bytes_out"],
                  "theory_bytes": theory, "file_bytes": size, "header_and_padding": size - theory,
                  "rel_err": r["totals"]["rel_err"]}))
PY
done
rm -f "$WORK/check.llmk"

# 128 prompt tokens, then NDEC greedy tokens, batch 1 (the file has no tokenizer: ids)
PROMPT=$("$PY" -c "import json; print(json.dumps({'id': 'b', 'tokens': [(i * 7919) % 50000 for i in range(128)], 'max_tokens': $NDEC, 'temperature': 0}))")
for r in $(seq 1 "$ROUNDS"); do
  for ty in f32 q8_0 q4_0; do
    f=$M; [ $ty = f32 ] || f=$WORK/gpt2_124m.$ty.llmk
    echo "$PROMPT" | OMP_WAIT_POLICY=passive "$B/llm-infer" "$f" --jsonl --stats --threads "$THREADS" \
      2>"$WORK/stats" >/dev/null
    s=$(grep '^{' "$WORK/stats" | tail -1)
    echo "{\"bench\":\"infer\",\"type\":\"$ty\",\"round\":$r,\"threads\":$THREADS,\"stats\":$s}"
  done
done

# the engine alone (no request handling): bench_infer on each file, when built (make bench)
if [ -x "$ROOT/build/bench/bench_infer" ]; then
  for r in $(seq 1 "$ROUNDS"); do
    for ty in f32 q8_0 q4_0; do
      f=$M; [ $ty = f32 ] || f=$WORK/gpt2_124m.$ty.llmk
      s=$(OMP_WAIT_POLICY=passive "$ROOT/build/bench/bench_infer" "$f" --threads "$THREADS" --steps 16)
      echo "{\"bench\":\"bench_infer\",\"type\":\"$ty\",\"round\":$r,\"result\":$s}"
    done
  done
fi
