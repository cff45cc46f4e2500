#!/usr/bin/env bash
# bench-infer.sh — llm-infer's engine on GPT-2 124M f32 (random weights), beside
# llama.cpp's llama-bench on the same weights when it is available.
#
#   scripts/bench-infer.sh [-r ROUNDS] [-t THREADS] [-s STEPS] [-m MODEL.llmk]
#                          [-l LLAMA_BENCH -g MODEL.gguf]
#
# Each round prints bench_infer's JSON line (prefill tokens/s for a 128-token prompt,
# decode tokens/s at batch 1 and 8, GB/s of weights streamed per decode step beside a
# measured read bandwidth, KV cache size and RSS), then, with -l and -g, llama-bench's
# pp128 / tg128 on the same threads, back to back.  The model file (default
# /tmp/llmkit-gpt2-124m.llmk) is created once and kept.  llama.cpp is not part of llmkit:
# build it yourself outside the tree and export the GGUF with its gguf-py (see
# BENCHMARKS.md); nothing of it is committed.  The machine may be shared: compare the
# numbers measured back to back, and look at the load printed first.  LLAMA_BENCH_ARGS
# adds options to llama-bench (e.g. "--poll 0" so its idle threads do not spin).
set -euo pipefail
ROUNDS=1 THREADS=2 STEPS=32 MODEL=/tmp/llmkit-gpt2-124m.llmk LB="" GGUF=""
while getopts r:t:s:m:l:g:h o; do
  case $o in
    r) ROUNDS=$OPTARG ;; t) THREADS=$OPTARG ;; s) STEPS=$OPTARG ;; m) MODEL=$OPTARG ;;
    l) LB=$OPTARG ;; g) GGUF=$OPTARG ;; *) sed -n '2,16p' "$0"; exit 64 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/build/bench/bench_infer
[ -x "$BENCH" ] || make -C "$ROOT" CUDA=0 bench >&2
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "# $(date -u +%FT%TZ) threads=$THREADS load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
  "$BENCH" "$MODEL" --keep --threads "$THREADS" --steps "$STEPS"
  if [ -n "$LB" ] && [ -n "$GGUF" ]; then
    # shellcheck disable=SC2086
    "$LB" -m "$GGUF" -t "$THREADS" -p 128 -n 128 -r 2 -o jsonl ${LLAMA_BENCH_ARGS:-} 2>/dev/null |
      python3 -c '
import json, sys
for l in sys.stdin:
    j = json.loads(l)
    name = "pp%d" % j["n_prompt"] if j["n_prompt"] else "tg%d" % j["n_gen"]
    print(json.dumps({"peer": "llama.cpp " + j.get("build_commit", "?"), "test": name,
                      "threads": j["n_threads"], "tokens_per_s": round(j["avg_ts"], 2)}))'
  fi
done
