#!/usr/bin/env bash
# demo.sh — llmkit's main job in one command (`make demo`):
#   1. get Tiny Shakespeare (scripts/get-data.sh; offline it copies from $LLMKIT_DATA,
#      else it falls back to text bundled here: llmkit's own man pages, rendered),
#   2. tokenize it byte by byte (llm-tokenize --vocab byte),
#   3. train a small GPT-2 (scripts/demo.yaml) for about 3 minutes on 2 CPU cores,
#      showing the validation loss fall,
#   4. print a sample from the model (llm-infer),
#   5. quantize it (llm-quantize q8_0, q4_0) and compare perplexity on the held-out text,
#   6. print a short profile of one training step (llm-profile).
# Environment: DEMO_DIR (default ./demo) holds everything the demo writes;
# DEMO_SECONDS (default 240) stops training early (with a checkpoint) on a slow machine;
# DEMO_STEPS overrides train.max_steps; LLMKIT_DATA as for scripts/get-data.sh.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-bin}
OUT=${DEMO_DIR:-demo}
SECS=${DEMO_SECONDS:-240}
say() { printf '\n== %s\n' "$*"; }
die() { echo "demo.sh: $*" >&2; exit 1; }
for p in llm-tokenize llm-train llm-infer llm-profile; do [ -x "$BIN/$p" ] || die "$BIN/$p is missing: run 'make' first"; done
mkdir -p "$OUT" || die "cannot create '$OUT'"

say "1. data"
DATA=${LLMKIT_DATA:-./data}
TEXT=$DATA/tinyshakespeare/input.txt
if [ ! -s "$TEXT" ]; then
  scripts/get-data.sh -q ./data >/dev/null 2>"$OUT/get-data.log"
  TEXT=./data/tinyshakespeare/input.txt
fi
if [ -s "$TEXT" ]; then
  echo "Tiny Shakespeare: $TEXT ($(wc -c <"$TEXT") bytes)"
else
  # offline and no LLMKIT_DATA: train on text this project wrote itself
  TEXT=$OUT/manpages.txt
  for m in man/man1/*.1 man/man5/*.5; do
    [ -f "$m" ] || continue
    if command -v mandoc >/dev/null; then mandoc -Tascii "$m" | col -b; else sed 's/^\.[A-Za-z]* *//' "$m"; fi
  done >"$TEXT"
  echo "offline: Tiny Shakespeare unavailable (see $OUT/get-data.log); training on llmkit's man pages ($(wc -c <"$TEXT") bytes)"
fi

say "2. tokenize (bytes; 10% held out for validation)"
"$BIN/llm-tokenize" -q --vocab byte --val-fraction 0.1 -o "$OUT/tokens" "$TEXT" || die "tokenizing failed"
ls -l "$OUT/tokens_train.bin" "$OUT/tokens_val.bin" | awk '{print $NF ": " $5 " bytes"}'

say "3. train (scripts/demo.yaml, 2 threads; stops after ${SECS}s at the latest)"
rm -rf "$OUT/run"
set -- --config scripts/demo.yaml -o "$OUT/run" --set data.train="$OUT/tokens_train.bin" \
  --set data.val="$OUT/tokens_val.bin" --metrics "$OUT/metrics.jsonl"
[ -n "${DEMO_STEPS:-}" ] && set -- "$@" --set train.max_steps="$DEMO_STEPS" --set train.warmup_steps=5
rm -f "$OUT/metrics.jsonl"
# other programs may share the cores: idle OpenMP threads sleep rather than spin
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
start=$SECONDS
timeout --preserve-status -s TERM "$SECS" "$BIN/llm-train" "$@" 2>"$OUT/train.log" &
pid=$!
shown=0
while kill -0 $pid 2>/dev/null; do
  sleep 2
  [ -f "$OUT/metrics.jsonl" ] || continue
  # the step lines every 50 steps and every eval line, as they come
  awk -v from=$shown 'NR > from {
      if (match($0, /"val_loss":[^,}]*/)) { s = $0; sub(/.*"step":/, "", s); sub(/,.*/, "", s);
        printf "  step %5d   val loss %.4f\n", s, substr($0, RSTART + 11, RLENGTH - 11) }
      else if (match($0, /^\{"step":[0-9]*[05]0,/)) { s = $0; sub(/^\{"step":/, "", s); sub(/,.*/, "", s);
        l = $0; sub(/.*"loss":/, "", l); sub(/,.*/, "", l);
        t = $0; sub(/.*"tokens_per_s":/, "", t); sub(/,.*/, "", t);
        printf "  step %5d   loss %.4f   %6.0f tokens/s\n", s, l, t } }' "$OUT/metrics.jsonl"
  shown=$(wc -l <"$OUT/metrics.jsonl")
done
wait $pid; rc=$?
[ $rc = 0 ] || { tail -5 "$OUT/train.log" >&2; die "training failed (exit $rc; log in $OUT/train.log)"; }
awk -v from=$shown 'NR > from && /val_loss/ { s = $0; sub(/.*"step":/, "", s); sub(/,.*/, "", s);
    v = $0; sub(/.*"val_loss":/, "", v); sub(/}.*/, "", v); printf "  step %5d   val loss %.4f\n", s, v }' "$OUT/metrics.jsonl"
first=$(grep -m1 '"loss"' "$OUT/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
vals=$(grep '"val_loss"' "$OUT/metrics.jsonl" | sed 's/.*"val_loss":\([^}]*\)}.*/\1/')
echo "trained $((SECONDS - start)) s: first loss $(printf %.3f "$first"), validation loss $(echo $vals | awk '{printf "%.3f -> %.3f", $1, $NF}')"
echo "checkpoints: $(ls "$OUT/run" | tr '\n' ' ')"

say "4. a sample from the model (llm-infer, temperature 0.8, top-k 40)"
MODEL=$(ls "$OUT"/run/step-*.llmk 2>/dev/null | sort | tail -1)
[ -n "$MODEL" ] || die "no checkpoint in $OUT/run"
"$BIN/llm-infer" "$MODEL" -p "ROMEO:" -n 300 --temperature 0.8 --top-k 40 --seed 1 --threads 2 ||
  die "llm-infer failed"
echo

say "5. quantize and compare perplexity on the held-out text"
printf '  %-6s %10s %10s\n' format bytes ppl
ppl() { "$BIN/llm-infer" "$1" --eval "$OUT/tokens_val.bin" --ctx 128 --stride 128 --threads 2 2>/dev/null |
        sed 's/.*"ppl": *\([0-9.eE+-]*\).*/\1/'; }
printf '  %-6s %10d %10.4f   (the training checkpoint: f32 weights and AdamW'"'"'s two moments)\n' \
  f32 "$(stat -c %s "$MODEL")" "$(ppl "$MODEL")"
if [ -x "$BIN/llm-quantize" ]; then
  for ty in q8_0 q4_0; do
    "$BIN/llm-quantize" -q "$MODEL" "$OUT/model-$ty.llmk" --type $ty 2>>"$OUT/quantize.log" ||
      { echo "  $ty: quantize failed (see $OUT/quantize.log)"; continue; }
    printf '  %-6s %10d %10.4f\n' $ty "$(stat -c %s "$OUT/model-$ty.llmk")" "$(ppl "$OUT/model-$ty.llmk")"
  done
else
  echo "  (llm-quantize is not built)"
fi

say "6. where one training step's time goes (llm-profile)"
"$BIN/llm-profile" "$MODEL" -b 16 -t 128 --mode train --steps 2 --threads 2 --peaks "$OUT/peaks.json" 2>/dev/null | head -25 ||
  echo "  (profile failed)"
echo
echo "Everything is in $OUT/ (metrics.jsonl, train.log, run/*.llmk, model-*.llmk)."
