#!/usr/bin/env bash
# bench-step.sh — time one llmkit GPT-2 training step (forward + backward + AdamW) for
# GPT-2 124M (B=4, T=64) and the small model (4 layers, 256 wide, B=8, T=128), each in
# its own process (so peak RSS is per model), repeated ROUNDS times.
#
#   scripts/bench-step.sh [-r ROUNDS] [-t THREADS] [-s STEPS] [-d DEVICE] [-m "124m small"]
#
# Each line is bench_step's JSON: median ms/step of STEPS steps after 2 warm-up steps,
# tokens/s, GFLOP/s (6 x params x tokens / time), the OpenBLAS sgemm rate measured in the
# same process, their ratio, and peak RSS.  The machine is shared: compare the ratio to
# sgemm, and see scripts/bench-peers.sh for llm.c and PyTorch measured back to back.
set -euo pipefail
ROUNDS=1 THREADS=2 STEPS=10 DEVICE=cpu MODELS="124m small"
while getopts r:t:s:d:m:h o; do
  case $o in
    r) ROUNDS=$OPTARG ;; t) THREADS=$OPTARG ;; s) STEPS=$OPTARG ;; d) DEVICE=$OPTARG ;;
    m) MODELS=$OPTARG ;; *) sed -n '2,12p' "$0"; exit 64 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/build/bench/bench_step
[ -x "$BENCH" ] || make -C "$ROOT" CUDA=0 bench >&2
echo "# $(date -u +%FT%TZ) threads=$THREADS load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    "$BENCH" "$m" --threads "$THREADS" --steps "$STEPS" --device "$DEVICE" --json
  done
done
