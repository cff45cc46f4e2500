#!/usr/bin/env bash
# bench-tokenize.sh — GPT-2 encode/decode throughput of llm-tokenize (a benchmark, not a test).
#
#   scripts/bench-tokenize.sh [-n REPEAT] [-r RUNS] [TEXT]
#
# TEXT (default: $LLMKIT_DATA/tinyshakespeare/input.txt, else ../shared/data/...) is
# concatenated REPEAT times (default 10).  Each configuration runs RUNS times (default 3)
# and the best is printed: encode with -j 1 and -j 2, then decode, as MB/s of text, both
# as measured inside the program (tokenizing only, from -v) and end to end (process wall
# time: vocabulary load, reading, tokenizing, writing the file), and end to end per CPU
# second (user + system time of the process, all threads): on a shared, loaded machine
# the wall-clock figures fall with the load, the CPU figure much less.  Compare numbers
# taken back to back.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/bin}
repeat=10 runs=3
while getopts n:r:h o; do
  case $o in
    n) repeat=$OPTARG ;; r) runs=$OPTARG ;;
    *) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 64 ;;
  esac
done
shift $((OPTIND - 1))
DATA=${LLMKIT_DATA:-$ROOT/../shared/data}
TEXT=${1:-$DATA/tinyshakespeare/input.txt}
VOCAB=${VOCAB_DIR:-$DATA/gpt2}
[ -x "$BIN/llm-tokenize" ] || { echo "bench-tokenize.sh: build first (make)" >&2; exit 69; }
[ -f "$TEXT" ] && [ -f "$VOCAB/encoder.json" ] ||
  { echo "bench-tokenize.sh: need $TEXT and $VOCAB (see scripts/get-data.sh)" >&2; exit 66; }
T=$(mktemp -d /tmp/bench-tokenize.XXXXXX)
trap 'rm -rf "$T"' EXIT
for _ in $(seq "$repeat"); do cat "$TEXT"; done >"$T/in.txt"
bytes=$(stat -c %s "$T/in.txt")

# run LABEL CMD...: best in-program MB/s (from the -v line) and best end-to-end MB/s
run() {
  local label=$1 best_in=0 best_wall=0 best_cpu=0; shift
  for _ in $(seq "$runs"); do
    local s e in wall cpu=0
    s=$(date +%s.%N)
    if [ -x /usr/bin/time ]; then
      /usr/bin/time -f 'cpu %U %S' -o "$T/time" "$@" 2>"$T/err" >"$T/out" || { cat "$T/err" >&2; exit 70; }
      cpu=$(awk -v b="$bytes" '/^cpu/ { t = $2 + $3; printf "%.1f", (t > 0 ? b / 1e6 / t : 0) }' "$T/time")
    else
      "$@" 2>"$T/err" >"$T/out" || { cat "$T/err" >&2; exit 70; }
    fi
    e=$(date +%s.%N)
    in=$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' "$T/err" | tail -1)
    wall=$(awk -v b="$bytes" -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", b / 1e6 / (e - s) }')
    best_in=$(awk -v a="$best_in" -v b="${in:-0}" 'BEGIN { print (b > a ? b : a) }')
    best_wall=$(awk -v a="$best_wall" -v b="$wall" 'BEGIN { print (b > a ? b : a) }')
    best_cpu=$(awk -v a="$best_cpu" -v b="$cpu" 'BEGIN { print (b > a ? b : a) }')
  done
  printf '%-12s %8s MB/s tokenizing %8s MB/s end to end %8s MB/s per CPU-s\n' "$label" "$best_in" \
    "$best_wall" "$best_cpu"
}

echo "input: $TEXT x $repeat = $bytes bytes; best of $runs; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "encode -j 1" "$BIN/llm-tokenize" -v --vocab gpt2 --vocab-dir "$VOCAB" -j 1 -o "$T/tok.bin" "$T/in.txt"
run "encode -j 2" "$BIN/llm-tokenize" -v --vocab gpt2 --vocab-dir "$VOCAB" -j 2 -o "$T/tok.bin" "$T/in.txt"
run "decode" "$BIN/llm-tokenize" -v --vocab gpt2 --vocab-dir "$VOCAB" -d -o "$T/dec.txt" "$T/tok.bin"
cmp -s "$T/dec.txt" "$T/in.txt" || { echo "bench-tokenize.sh: decode differs from the input" >&2; exit 70; }
