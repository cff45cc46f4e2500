#!/usr/bin/env bash
# bench-quant-peers.sh — a quantized GPT-2 (q8_0/q4_0 .llmk) in llmkit's bench_infer
# beside llama.cpp's llama-bench on the same weights (the GGUF of `llm-shard export --to
# gguf`), and optionally beside another build of bench_infer (the kernels before a
# change), interleaved: each round runs every program once, back to back, the two
# bench_infer builds in alternating order; then the medians and the median of the
# per-round ratios.  This VM swings 30-60% between series, so only same-round ratios
# compare.
#
#   scripts/bench-quant-peers.sh -m M.llmk -g M.gguf [-r ROUNDS] [-t THREADS]
#                                [-b OLD_BENCH_INFER] [-l LLAMA_BENCH] [-o RAW_FILE]
#
# bench_infer: `M.llmk --threads T --steps 64` (prefill of a 128-token prompt, decode at
# batch 1 and 8); llama-bench: `-m M.gguf -t T -p 128 -n 64 -r 3` with `--poll 0` (its
# idle threads sleep) and with its default polling.  OMP_WAIT_POLICY stays as exported
# (unset: each OpenMP runtime's default; PASSIVE is kinder on a shared machine).
# Needs build/bench/bench_infer (make bench CUDA=0) and a llama.cpp build (not part of
# llmkit, never committed; default /tmp/llamacpp/build/bin/llama-bench).
set -euo pipefail
ROUNDS=5 THREADS=2 MODEL="" GGUF="" OLD="" LB=/tmp/llamacpp/build/bin/llama-bench OUT=""
while getopts r:t:m:g:b:l:o:h o; do
  case $o in
    r) ROUNDS=$OPTARG ;; t) THREADS=$OPTARG ;; m) MODEL=$OPTARG ;; g) GGUF=$OPTARG ;;
    b) OLD=$OPTARG ;; l) LB=$OPTARG ;; o) OUT=$OPTARG ;; *) sed -n '2,19p' "$0"; exit 64 ;;
  esac
done
[ -n "$MODEL" ] && [ -n "$GGUF" ] || { sed -n '2,19p' "$0"; exit 64; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NEW=$ROOT/build/bench/bench_infer
[ -x "$NEW" ] || make -C "$ROOT" CUDA=0 bench >&2
[ -x "$LB" ] || { echo "bench-quant-peers.sh: no llama-bench at $LB (-l)" >&2; exit 69; }
RAW=${OUT:-$(mktemp /tmp/bench-quant-peers.XXXXXX)}
: >"$RAW"
echo "# $(date -u +%FT%TZ) $MODEL threads=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}" >&2
bi() { echo "$1 $("$2" "$MODEL" --threads "$THREADS" --steps 64)" >>"$RAW"; }
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"
  if [ -z "$OLD" ]; then bi new "$NEW"
  elif [ $((r % 2)) = 1 ]; then bi old "$OLD"; bi new "$NEW"
  else bi new "$NEW"; bi old "$OLD"; fi
  for poll in 0 50; do
    "$LB" -m "$GGUF" -t "$THREADS" -p 128 -n 64 -r 3 --poll $poll -o jsonl 2>/dev/null |
      sed "s/^/llama.cpp-poll$poll /" >>"$RAW"
  done
  echo "round $r done" >&2
done
echo "end load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"
python3 - "$RAW" <<'PY'
import json, statistics as S, sys
rounds, loads = [], []
for line in open(sys.argv[1]):
    tag, _, rest = line.strip().partition(" ")
    if tag == "round":
        rounds.append({}); loads.append(rest.split()[2]); continue
    if tag == "end":
        loads.append(rest.split()[1]); continue
    j = json.loads(rest)
    if tag in ("old", "new"):
        rounds[-1][tag] = {"prefill128": j["prefill128_tokens_per_s"], "decode_b1": j["decode_b1_tokens_per_s"],
                           "decode_b8": j["decode_b8_tokens_per_s"]}
    else:
        rounds[-1].setdefault(tag, {})["prefill128" if j["n_prompt"] else "decode_b1"] = j["avg_ts"]
progs = [p for p in ("old", "new", "llama.cpp-poll0", "llama.cpp-poll50") if p in rounds[0]]
print("rounds %d, load average (1 min) at each round's start and the end: %s" % (len(rounds), " ".join(loads)))
for m in ("decode_b1", "prefill128", "decode_b8"):
    have = [p for p in progs if m in rounds[0][p]]
    print("%-10s tok/s medians: %s" % (m, ", ".join("%s %.1f" % (p, S.median(r[p][m] for r in rounds)) for p in have)))
    for a, b in [("new", "old")] + [(x, y) for x in ("new", "old") for y in ("llama.cpp-poll0", "llama.cpp-poll50")]:
        if a in have and b in have:
            q = [r[a][m] / r[b][m] for r in rounds]
            print("    %s / %s: median %.2fx (%.2f-%.2f), %s faster in %d of %d" %
                  (a, b, S.median(q), min(q), max(q), a, sum(x > 1 for x in q), len(q)))
PY
echo "raw results: $RAW" >&2
