#!/usr/bin/env bash
# llm-shard info/verify: options, pipes, JSON, and the hostile-file suite
# (tests/cli/shard_hostile.py builds the bad files; one TAP line per family).
. "$(dirname "$0")/lib.sh"
S=$ROOT/tests/data/sample.llmk
PY=${PYTHON:-python3}

expect_exit "--help exits 0" 0 llm-shard --help
grep -q '^  info ' "$TMP/out" && grep -q '^  verify ' "$TMP/out" && ok "--help lists the commands" || notok "--help lists the commands"
expect_exit "--version exits 0" 0 llm-shard --version
expect_exit "info --help exits 0" 0 llm-shard info --help
expect_exit "verify --help exits 0" 0 llm-shard verify --help
expect_exit "bad option exits 64" 64 llm-shard --no-such-option
expect_exit "bad subcommand option exits 64" 64 llm-shard info --bogus "$S"
expect_exit "unknown command exits 64" 64 llm-shard frobnicate "$S"
expect_exit "missing command exits 64" 64 llm-shard
expect_exit "missing file argument exits 64" 64 llm-shard verify
expect_exit "extra argument exits 64" 64 llm-shard verify "$S" "$S"
expect_exit "missing file exits 66" 66 llm-shard verify "$TMP/nope.llmk"
expect_exit "a directory exits 66" 66 llm-shard info "$TMP"

expect_exit "verify sample" 0 llm-shard verify "$S"
grep -q ': ok (5 tensors' "$TMP/out" && ok "verify prints ok" || notok "verify prints ok: $(cat "$TMP/out")"
expect_exit "verify -q prints nothing" 0 llm-shard verify -q "$S"
[ ! -s "$TMP/out" ] && ok "verify -q output empty" || notok "verify -q output empty"
cat "$S" | llm-shard verify - >"$TMP/out" 2>"$TMP/err" && grep -q '<stdin>: ok' "$TMP/out" \
  && ok "verify from a pipe" || notok "verify from a pipe: $(cat "$TMP/err")"
expect_exit "info sample" 0 llm-shard info "$S"
grep -q 'arch: gpt2' "$TMP/out" && grep -qE '^  wpe +f32 +\[16, 16\] +1024 +[0-9]+ +zlib' "$TMP/out" \
  && ok "info shows model section and tensor table" || notok "info text: $(head -20 "$TMP/out")"
cat "$S" | llm-shard info - >"$TMP/pipe.txt" 2>"$TMP/err"
sed 1d "$TMP/pipe.txt" >"$TMP/a"; llm-shard info "$S" | sed 1d >"$TMP/b"
cmp -s "$TMP/a" "$TMP/b" && ok "info from a pipe equals info from the file" || notok "info from a pipe: $(cat "$TMP/err")"
llm-shard info --json "$S" >"$TMP/info.json" 2>"$TMP/err"
"$PY" - "$TMP/info.json" "$S" <<'P' && ok "info --json parses and is complete" || notok "info --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["model"]["arch"] == "gpt2" and d["model"]["n_embd"] == 16, d["model"]
assert d["tokenizer"]["kind"] == "byte"
names = [t["name"] for t in d["tensors"]]
assert names == ["wte", "wpe", "ln_f.w", "tok.ids", "mask"], names
wpe = d["tensors"][1]
assert wpe["compressed"] is True and wpe["shape"] == [16, 16] and wpe["nbytes"] == 1024 and wpe["stored"] < 1024
import os
assert d["size"] == os.path.getsize(sys.argv[2]) and d["version"] == 1
P
cat "$S" | llm-shard info -j - | "$PY" -c 'import json,sys; json.load(sys.stdin)' \
  && ok "info --json from a pipe" || notok "info --json from a pipe"
llm-shard info "$S" 2>"$TMP/err" | head -c 10 >/dev/null
[ ! -s "$TMP/err" ] && ok "closed stdout ends quietly" || notok "closed stdout: $(cat "$TMP/err")"

# a flipped data byte is caught and the tensor named
cp "$S" "$TMP/flip.llmk"
n=$(stat -c %s "$S")
printf '\x5a' | dd of="$TMP/flip.llmk" bs=1 seek=$((n - 3)) conv=notrunc 2>/dev/null
cmp -s "$S" "$TMP/flip.llmk" && printf '\xa5' | dd of="$TMP/flip.llmk" bs=1 seek=$((n - 3)) conv=notrunc 2>/dev/null
expect_exit "flipped data byte exits 65" 65 llm-shard verify "$TMP/flip.llmk"
grep -q "tensor 'mask': crc32 mismatch" "$TMP/err" && ok "flipped byte names the tensor" || notok "message: $(cat "$TMP/err")"

# hostile files
if command -v "$PY" >/dev/null; then
  "$PY" "$ROOT/tests/cli/shard_hostile.py" "$(command -v llm-shard)" "$S" "$TMP" >"$TMP/hostile" 2>&1
  rc=$?
  while IFS= read -r line; do
    case "$line" in
      PASS\ *) ok "hostile: ${line#PASS }" ;;
      FAIL\ *) notok "hostile: ${line#FAIL }" ;;
    esac
  done <"$TMP/hostile"
  [ $rc = 0 ] && ok "hostile suite ran" || notok "hostile suite: $(tail -5 "$TMP/hostile")"
else
  skip "hostile suite" "no python3"
fi

# fuzzer regressions: never a crash
# (files only: the other fuzz targets' findings are in subdirectories, see fuzz_replay.sh)
regs=()
for f in "$ROOT"/tests/fuzz/regress/*; do [ -f "$f" ] && regs+=("$f"); done
if [ ${#regs[@]} -gt 0 ]; then
  bad=0
  for f in "${regs[@]}"; do
    llm-shard verify "$f" >/dev/null 2>&1; rc=$?
    { [ $rc -ge 128 ] || [ $rc = 98 ] || [ $rc = 99 ]; } && { bad=$((bad + 1)); echo "# crash: $f (rc $rc)"; }
  done
  [ $bad = 0 ] && ok "fuzz regressions replay without a crash (${#regs[@]})" || notok "fuzz regressions: $bad crashed"
else
  skip "fuzz regressions" "none kept"
fi
echo "1..$_n"
