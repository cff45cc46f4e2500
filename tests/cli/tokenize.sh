#!/usr/bin/env bash
# CLI tests for llm-tokenize and scripts/get-data.sh.
. "$(dirname "$0")/lib.sh"
T=llm-tokenize
G="--vocab gpt2 --vocab-dir $DATA/gpt2"

# ---- usage ----
expect_exit "help exits 0" 0 $T --help
grep -q -- '--val-fraction' "$TMP/out" && ok "help lists --val-fraction" || notok "help lists --val-fraction"
expect_exit "version exits 0" 0 $T --version
expect_exit "unknown option is 64" 64 $T --bogus
expect_exit "bad --format is 64" 64 $T --vocab byte --format xml
expect_exit "--val-fraction without -o is 64" 64 $T --vocab byte --val-fraction 0.1
# endless token input is refused by its header, not read to the end of memory
expect_exit "-d of /dev/zero: bad magic, 65" 65 timeout 20 $T -d --vocab byte --count /dev/zero
expect_exit "-d of an endless pipe: 65" 65 timeout 20 sh -c "$T -d --vocab byte --count - </dev/zero"
printf 'hi\n' | $T --vocab byte -o "$TMP/hi.bin" -
expect_exit "-d of a valid header followed by endless bytes: 65" 65 timeout 20 \
  sh -c "cat '$TMP/hi.bin' /dev/zero | $T -d --vocab byte --count -"
check "... says the length does not match the header" grep -q "header says 3 tokens" "$TMP/err"
expect_exit "--val-fraction 1 is 64" 64 $T --vocab byte --val-fraction 1 -o "$TMP/x"
printf 'tiny\n' >"$TMP/vtiny.txt"; head -c 20000 /dev/zero | tr '\0' a >"$TMP/vbig.txt"
$T --vocab byte --eot --val-fraction 0.1 -o "$TMP/vf" "$TMP/vtiny.txt" "$TMP/vbig.txt" 2>"$TMP/err" >/dev/null
check "a lopsided split (val 20001 of 20007 tokens for 0.1) is said" grep -q "vf_val.bin: 20001 tokens (far from --val-fraction" "$TMP/err"
$T --vocab byte --eot --val-fraction 0.1 -o "$TMP/vg" $(for i in $(seq 10); do echo "$TMP/vbig.txt"; done) 2>"$TMP/err" >/dev/null
check "... an even one is not" sh -c "grep -q 'vg_val.bin: 20001 tokens' '$TMP/err' && ! grep -q 'far from' '$TMP/err'"
# 0 is outside (0, 1) too: it was taken as no split and wrote PREFIX itself, exit 0
printf 'hi\n' >"$TMP/vf0.txt"
expect_exit "--val-fraction 0 is 64" 64 $T --vocab byte --val-fraction 0 -o "$TMP/vf0" "$TMP/vf0.txt"
check "... and writes nothing" sh -c "[ ! -e '$TMP/vf0' ] && [ ! -e '$TMP/vf0_train.bin' ]"
expect_exit "--val-fraction -0 is 64" 64 $T --vocab byte --val-fraction -0 -o "$TMP/vf0" "$TMP/vf0.txt"
expect_exit "unknown vocabulary is 66" 66 $T --vocab gpt3 --count /dev/null

# ---- byte tokenizer: files, pipes, ids ----
printf 'Hello\0\xff\xfe world\n' >"$TMP/small.txt"
check "byte encode to file" $T --vocab byte -o "$TMP/small.bin" "$TMP/small.txt"
sz=$(stat -c %s "$TMP/small.bin")
[ "$sz" = $((1024 + 2 * 15)) ] && ok "byte token file size" || notok "byte token file size ($sz)"
$T --vocab byte -d "$TMP/small.bin" >"$TMP/small.out" && cmp -s "$TMP/small.txt" "$TMP/small.out" &&
  ok "byte decode round trip" || notok "byte decode round trip"
head -c 300000 /dev/urandom >"$TMP/big.raw"
$T --vocab byte -j 2 -o "$TMP/big.bin" "$TMP/big.raw" && $T --vocab byte -d -o "$TMP/big.dec" "$TMP/big.bin" &&
  cmp -s "$TMP/big.raw" "$TMP/big.dec" && ok "byte round trip over several chunks" || notok "byte round trip over several chunks"
out=$(printf 'AB' | $T --vocab byte --format ids)
[ "$out" = "65 66" ] && ok "byte ids" || notok "byte ids ($out)"
out=$(printf 'AB' | $T --vocab byte --eot --format ids)
[ "$out" = "256 65 66" ] && ok "byte --eot" || notok "byte --eot ($out)"
out=$(echo "72 105" | $T --vocab byte -d --format ids)
[ "$out" = "Hi" ] && ok "decode --format ids" || notok "decode --format ids ($out)"
# any white space separates ids (the man page): vertical tab and form feed too
out=$(printf '72\v105\f33\n' | $T --vocab byte -d --format ids)
check "decode --format ids: \\v and \\f separate ids" [ "$out" = "Hi!" ]
cat "$TMP/small.txt" | $T --vocab byte -o - | $T --vocab byte -d - >"$TMP/pipe.out" &&
  cmp -s "$TMP/small.txt" "$TMP/pipe.out" && ok "pipe round trip" || notok "pipe round trip"
out=$($T --vocab byte --count "$TMP/small.txt" "$TMP/small.txt")
[ "$out" = 30 ] && ok "--count over two files" || notok "--count over two files ($out)"
out=$($T --vocab byte -d --count "$TMP/small.bin")
[ "$out" = 15 ] && ok "decode --count" || notok "decode --count ($out)"
# LLM_TOKENIZE_WINDOW is the encoder's (-d has no window) but read strictly by -d too
LLM_TOKENIZE_WINDOW=16M expect_exit "-d with LLM_TOKENIZE_WINDOW=16M: 64" 64 $T --vocab byte -d -o "$TMP/win.txt" "$TMP/small.bin"
check "... naming it, no output" sh -c "grep -q \"LLM_TOKENIZE_WINDOW '16M'\" '$TMP/err' && [ ! -e '$TMP/win.txt' ]"
LLM_TOKENIZE_WINDOW=1 $T --vocab byte -d "$TMP/small.bin" >"$TMP/win.out" && cmp -s "$TMP/small.txt" "$TMP/win.out" &&
  ok "-d with LLM_TOKENIZE_WINDOW=1: the same text" || notok "-d with LLM_TOKENIZE_WINDOW=1: the same text"

# ---- documents, --eot, --split-docs, --val-fraction ----
printf 'one\n\ntwo\n\n\nthree\n' >"$TMP/docs.txt"
out=$($T --vocab byte --eot --split-docs --format ids "$TMP/docs.txt" | tr ' ' '\n' | grep -c '^256$')
[ "$out" = 3 ] && ok "--split-docs finds 3 documents" || notok "--split-docs finds 3 documents ($out)"
$T --vocab byte --eot --split-docs --format ids "$TMP/docs.txt" | $T --vocab byte -d --format ids >"$TMP/docs.out"
[ "$(cat "$TMP/docs.out")" = "$(printf '<|endoftext|>one\n\n<|endoftext|>two\n\n\n<|endoftext|>three\n')" ] &&
  ok "documents keep their blank lines" || notok "documents keep their blank lines"
for i in $(seq 1 40); do printf 'document %d says hello\n\n' "$i"; done >"$TMP/many.txt"
check "--val-fraction writes two files" $T --vocab byte --eot --split-docs --val-fraction 0.25 -o "$TMP/split" "$TMP/many.txt"
tr=$($T --vocab byte -d --count "$TMP/split_train.bin"); va=$($T --vocab byte -d --count "$TMP/split_val.bin")
all=$($T --vocab byte --eot --split-docs --count "$TMP/many.txt")
[ $((tr + va)) = "$all" ] && ok "train + val = all tokens" || notok "train + val = all tokens ($tr + $va != $all)"
first=$($T --vocab byte -d "$TMP/split_val.bin" | head -c 13)
[ "$first" = "<|endoftext|>" ] && ok "val starts at a document" || notok "val starts at a document ($first)"
[ "$va" -gt $((all / 5)) ] && [ "$va" -lt $((all * 3 / 10)) ] && ok "val is about 25%" || notok "val is about 25% ($va of $all)"
check "--val-fraction on one document" $T --vocab byte --val-fraction 0.5 -o "$TMP/one" "$TMP/small.txt"
cat "$TMP/one_train.bin" >/dev/null && [ "$($T --vocab byte -d --count "$TMP/one_val.bin")" = 8 ] &&
  ok "single document cut at the token" || notok "single document cut at the token"

# ---- GPT-2 ----
if have_data gpt2/encoder.json && have_data tinyshakespeare/input.gpt2.u16; then
  out=$(printf 'Hello world' | $T $G --format ids)
  [ "$out" = "15496 995" ] && ok "gpt2 Hello world" || notok "gpt2 Hello world ($out)"
  out=$(printf '<|endoftext|>' | $T $G --format ids)
  [ "$out" = "27 91 437 1659 5239 91 29" ] && ok "literal <|endoftext|> is text" || notok "literal <|endoftext|> is text ($out)"
  # each document is encoded on its own (the man page): its closing blank line is one id
  out=$(printf 'a.\n\nAll' | $T $G --format ids)
  check "gpt2: a blank line before a word is 198 198" [ "$out" = "64 13 198 198 3237" ]
  out=$(printf 'a.\n\nAll' | $T $G --split-docs --format ids)
  check "... and 628 where it ends a document (--split-docs, no --eot)" [ "$out" = "64 13 628 3237" ]
  out=$(printf 'a' | $T $G --eot --format ids)
  [ "$out" = "50256 64" ] && ok "gpt2 --eot is 50256" || notok "gpt2 --eot is 50256 ($out)"
  LLMKIT_DATA=$DATA $T --format ids </dev/null >/dev/null && ok "vocab found through LLMKIT_DATA" ||
    notok "vocab found through LLMKIT_DATA"
  $T $G -j 1 -o "$TMP/ts1.bin" "$DATA/tinyshakespeare/input.txt" &&
    tail -c +1025 "$TMP/ts1.bin" | cmp -s - "$DATA/tinyshakespeare/input.gpt2.u16" &&
    ok "tiny shakespeare exact" || notok "tiny shakespeare exact"
  $T $G -j 3 -o "$TMP/ts3.bin" "$DATA/tinyshakespeare/input.txt" && cmp -s "$TMP/ts1.bin" "$TMP/ts3.bin" &&
    ok "-j 3 gives the same file" || notok "-j 3 gives the same file"
  $T $G -d "$TMP/ts1.bin" | cmp -s - "$DATA/tinyshakespeare/input.txt" && ok "gpt2 decode round trip" ||
    notok "gpt2 decode round trip"
  head -c 100000 /dev/urandom >"$TMP/rnd"
  $T $G -o "$TMP/rnd.bin" "$TMP/rnd" && $T $G -d "$TMP/rnd.bin" | cmp -s - "$TMP/rnd" &&
    ok "random bytes round trip" || notok "random bytes round trip"
  expect_exit "gpt2 ids out of range for byte vocab is 65" 65 $T --vocab byte -d "$TMP/ts1.bin"
  grep -q "out of range" "$TMP/err" && ok "out-of-range message" || notok "out-of-range message"
  # closed stdout ends quietly
  $T $G --format ids "$DATA/tinyshakespeare/input.txt" 2>"$TMP/pipe.err" | head -c 10 >/dev/null
  [ ! -s "$TMP/pipe.err" ] && ok "closed stdout is quiet" || notok "closed stdout is quiet ($(head -c 200 "$TMP/pipe.err"))"
  # corrupt vocabularies
  mkdir -p "$TMP/badv"
  cp "$DATA/gpt2/vocab.bpe" "$TMP/badv/"
  head -c 5000 "$DATA/gpt2/encoder.json" >"$TMP/badv/encoder.json"
  expect_exit "truncated encoder.json is 65" 65 $T --vocab gpt2 --vocab-dir "$TMP/badv" --count /dev/null
  [ "$(wc -l <"$TMP/err")" = 1 ] && ok "one error line" || notok "one error line ($(cat "$TMP/err"))"
  expect_exit "missing vocab dir is 66" 66 $T --vocab gpt2 --vocab-dir "$TMP/nope" --count /dev/null
else
  skip "gpt2 tests" "shared data not found (set LLM_DATA)"
fi
# no GPT-2 vocabulary where the default looks: the error says where it is looked for and
# how to get it; a --vocab-dir that lacks it is only named
mkdir -p "$TMP/novocab"
(cd "$TMP/novocab" && env -u LLMKIT_DATA -u LLM_DATA $T --count /dev/null >/dev/null 2>"$TMP/nv.err"); rc=$?
[ $rc = 66 ] && grep -q "scripts/get-data.sh" "$TMP/nv.err" && grep -q 'LLMKIT_DATA' "$TMP/nv.err" &&
  grep -q -- '--vocab-dir' "$TMP/nv.err" && ok "missing default vocabulary: exit 66 and how to get it" ||
  notok "missing default vocabulary: exit $rc, $(cat "$TMP/nv.err")"
(cd "$TMP/novocab" && $T --vocab-dir "$TMP/nope" --count /dev/null >/dev/null 2>"$TMP/nv.err"); rc=$?
[ $rc = 66 ] && [ "$(wc -l <"$TMP/nv.err")" = 1 ] && ok "missing --vocab-dir: one error line" ||
  notok "missing --vocab-dir: exit $rc, $(cat "$TMP/nv.err")"
# the default looks in $LLMKIT_DATA/gpt2, $LLM_DATA/gpt2, then ./data/gpt2, as llm-train
# does: a LLMKIT_DATA without gpt2/ falls through to LLM_DATA's
if have_data gpt2/encoder.json; then
  n=$(cd "$TMP/novocab" && printf 'Hello world' | LLMKIT_DATA="$TMP/novocab" LLM_DATA="$DATA" $T --count 2>"$TMP/nv.err")
  check "default vocabulary: \$LLMKIT_DATA without gpt2/, then \$LLM_DATA's ($n tokens)" [ "$n" = 2 ]
  mkdir -p "$TMP/novocab/data" && ln -sfn "$DATA/gpt2" "$TMP/novocab/data/gpt2"
  n=$(cd "$TMP/novocab" && printf 'Hello world' | env -u LLMKIT_DATA -u LLM_DATA $T --count 2>"$TMP/nv.err")
  check "... then ./data/gpt2 ($n tokens)" [ "$n" = 2 ]
  rm -rf "$TMP/novocab/data"
else
  skip "default vocabulary search" "shared data not found"
fi

# ---- streaming: any window gives the same files, and memory stays near the window ----
if have_data gpt2/encoder.json && have_data tinyshakespeare/input.gpt2.u16; then
  TS=$DATA/tinyshakespeare/input.txt
  $T $G -o "$TMP/ts.bin" "$TS" && tail -c +1025 "$TMP/ts.bin" | cmp -s - "$DATA/tinyshakespeare/input.gpt2.u16" &&
    ok "tiny shakespeare gives the reference ids" || notok "tiny shakespeare gives the reference ids"
  LLM_TOKENIZE_WINDOW=4096 $T $G -j 2 -o "$TMP/ts4k.bin" - <"$TS" &&
    cmp -s "$TMP/ts.bin" "$TMP/ts4k.bin" && ok "a 4 KiB window from a pipe: the same file" || notok "a 4 KiB window from a pipe: the same file"
  $T $G --eot --split-docs --val-fraction 0.1 -o "$TMP/tsw" "$TS" "$TS" &&
    LLM_TOKENIZE_WINDOW=777 $T $G --eot --split-docs --val-fraction 0.1 -j 3 -o "$TMP/tsv" "$TS" - <"$TS" &&
    cmp -s "$TMP/tsw_train.bin" "$TMP/tsv_train.bin" && cmp -s "$TMP/tsw_val.bin" "$TMP/tsv_val.bin" &&
    ok "--split-docs --eot --val-fraction: the same pair through a 777-byte window" ||
    notok "--split-docs --eot --val-fraction: the same pair through a 777-byte window"
  # CRLF line ends and one long line: cut before '\r' and spaces, the same ids, small peak
  "${PY:-python3}" -c "import sys; d = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(d.replace(b'\n', b'\r\n') * 10); open(sys.argv[3], 'wb').write(d.replace(b'\n', b' ') * 10)" \
    "$TS" "$TMP/crlf.txt" "$TMP/line.txt"
  for f in crlf line; do
    $T $G -o "$TMP/$f.big.bin" "$TMP/$f.txt" &&
      LLM_TOKENIZE_WINDOW=65536 $T $G -o "$TMP/$f.win.bin" "$TMP/$f.txt" && cmp -s "$TMP/$f.big.bin" "$TMP/$f.win.bin" &&
      ok "$f text: the same ids through a 64 KiB window" || notok "$f text: the same ids through a 64 KiB window"
  done
  a=$($T $G --format ids "$TS" | md5sum); b=$(LLM_TOKENIZE_WINDOW=100 $T $G --format ids "$TS" | md5sum)
  [ "$a" = "$b" ] && ok "--format ids: the same text through a 100-byte window" || notok "--format ids through a 100-byte window"
fi
# 48 MB of text through a 1 MiB window into a file: the peak resident size stays far
# below the input (it was about 9 bytes per input byte when the input was held whole)
if [ -z "${LLM_SAN:-}" ]; then
  head -c 50331648 /dev/urandom >"$TMP/48m.raw"
  rss=$(LLM_TOKENIZE_WINDOW=1048576 "${PY:-python3}" - "$BIN/$T" "$TMP/48m.raw" "$TMP/48m.bin" <<'PY'
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "--vocab", "byte", "-j", "2", "-o", sys.argv[3], sys.argv[2]])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024 if r.returncode == 0 else -1)
PY
)
  sz=$(stat -c %s "$TMP/48m.bin" 2>/dev/null)
  [ "$sz" = $((1024 + 2 * 50331648)) ] && [ "$rss" -ge 0 ] && [ "$rss" -lt 64 ] &&
    ok "48 MB streamed with a peak of $rss MB" || notok "48 MB streamed (peak ${rss} MB, file $sz bytes)"
  rm -f "$TMP/48m.raw" "$TMP/48m.bin"
  # 20 MB of long words that never repeat: the pre-token cache is bounded too (92 MB
  # peak before its arena had a limit, 28 MB after)
  if have_data gpt2/encoder.json; then
    "${PY:-python3}" -c "import random, string; r = random.Random(1); open('$TMP/lw.txt', 'w').write(''.join(' ' + ''.join(r.choices(string.ascii_lowercase, k=126)) for _ in range(157480)))"
    rss=$(LLM_TOKENIZE_WINDOW=1048576 "${PY:-python3}" - "$BIN/$T" "$TMP/lw.txt" "$TMP/lw.bin" "$DATA/gpt2" <<'PY'
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "--vocab-dir", sys.argv[4], "-j", "1", "-o", sys.argv[3], sys.argv[2]])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024 if r.returncode == 0 else -1)
PY
)
    [ "$rss" -ge 0 ] && [ "$rss" -lt 48 ] && ok "20 MB of unique long words with a peak of $rss MB" ||
      notok "20 MB of unique long words (peak ${rss} MB)"
    rm -f "$TMP/lw.txt" "$TMP/lw.bin"
  fi
else
  skip "streaming peak memory" "not measured under the sanitizers"
fi
# --shard-tokens: fixed-size shards whose concatenation is the single file
mkdir -p "$TMP/sh"
$T --vocab byte --shard-tokens 100000 -o "$TMP/sh/b" "$TMP/big.raw" 2>"$TMP/sh.err" && ok "--shard-tokens 100000 over 300000 bytes" ||
  notok "--shard-tokens 100000 over 300000 bytes: $(cat "$TMP/sh.err")"
if [ "$(ls "$TMP/sh" | tr '\n' ' ')" = "b_000000.bin b_000001.bin b_000002.bin " ] && [ "$(stat -c %s "$TMP/sh/b_000001.bin")" = $((1024 + 200000)) ]; then ok "... three full shards"; else notok "... three full shards"; fi
for f in "$TMP"/sh/b_*.bin; do tail -c +1025 "$f"; done | cmp -s - <(tail -c +1025 "$TMP/big.bin") &&
  ok "... whose ids in order are the single file's" || notok "... whose ids in order are the single file's"
check "... the log names the shards" grep -q "3 shards, .*b_000000.bin .. .*b_000002.bin: 300000 tokens" "$TMP/sh.err"
LLM_TOKENIZE_WINDOW=1000 $T --vocab byte --eot --split-docs --shard-tokens 7 -o "$TMP/sh/d" "$TMP/docs.txt" &&
  [ "$(ls "$TMP/sh" | grep -c '^d_')" = 3 ] &&
  [ "$(for f in "$TMP"/sh/d_*.bin; do $T --vocab byte -d "$f"; done)" = "$($T --vocab byte --eot --split-docs --format ids "$TMP/docs.txt" | $T --vocab byte -d --format ids)" ] &&
  ok "shards of 7 tokens split documents, and decode back to the text" || notok "shards of 7 tokens"
cat >"$TMP/sh/t.yaml" <<Y
model: {arch: gpt2, n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: "$TMP/sh/b_*.bin", tokenizer: byte}
train: {batch_size: 2, seq_len: 16, max_steps: 2, warmup_steps: 1, threads: 1}
Y
check "llm-train trains from the shards through a glob" llm-train --config "$TMP/sh/t.yaml" -o "$TMP/sh-run" -q
expect_exit "shards exist already: 64" 64 $T --vocab byte --shard-tokens 100000 -o "$TMP/sh/b" "$TMP/big.raw"
check "... naming the first" grep -q "b_000000.bin' exists: remove the earlier shards" "$TMP/err"
# llm.c's loader asserts a token file's count is above 0, and reads it as an int
expect_exit "an empty input: refused, 65" 65 $T --vocab byte --shard-tokens 10 -o "$TMP/sh/e" /dev/null
check "... saying why, no shard written" sh -c "grep -q \"e_000000.bin': no tokens to write (llm.c's loader refuses an empty token file)\" '$TMP/err' && [ ! -e '$TMP/sh/e_000000.bin' ]"
expect_exit "an empty input to one file: refused, 65" 65 $T --vocab byte -o "$TMP/sh/e.bin" /dev/null
check "... none written" [ ! -e "$TMP/sh/e.bin" ]
expect_exit "--shard-tokens above INT32_MAX: 64" 64 $T --vocab byte --shard-tokens 2147483648 -o "$TMP/sh/g" "$TMP/small.txt"
check "... naming the limit" grep -q "1..2147483647" "$TMP/err"
# a read error after shards were finished: 74, and none of this run's shards stay
expect_exit "a read error after two shards: 74" 74 $T --vocab byte --shard-tokens 100000 -o "$TMP/sh/f" "$TMP/big.raw" /proc/self/mem
check "... leaves no shard" [ -z "$(ls -A "$TMP/sh" | grep 'f_')" ]
expect_exit "--shard-tokens with --val-fraction: 64" 64 $T --vocab byte --shard-tokens 10 --val-fraction 0.1 -o "$TMP/sh/x" "$TMP/small.txt"
expect_exit "--shard-tokens to stdout: 64" 64 $T --vocab byte --shard-tokens 10 "$TMP/small.txt"
expect_exit "--shard-tokens 0: 64" 64 $T --vocab byte --shard-tokens 0 -o "$TMP/sh/x" "$TMP/small.txt"
# the prefix is a name, not a glob: 'g[1]' is not refused for g1_*, and is for its own
printf 'x' >"$TMP/sh/g1_000000.bin"
check "a prefix with glob characters: shards written" $T --vocab byte --shard-tokens 10 -o "$TMP/sh/g[1]" "$TMP/small.txt"
check "... beside another prefix's shard the glob would have matched" [ -f "$TMP/sh/g[1]_000001.bin" ]
expect_exit "... and refused the second time: 64" 64 $T --vocab byte --shard-tokens 10 -o "$TMP/sh/g[1]" "$TMP/small.txt"
expect_exit "--shard-tokens -1: 64" 64 $T --vocab byte --shard-tokens -1 -o "$TMP/sh/x" "$TMP/small.txt"
# INT64_MIN was the "not given" mark: it wrote PREFIX itself, one file, exit 0
expect_exit "--shard-tokens -9223372036854775808: 64" 64 $T --vocab byte --shard-tokens -9223372036854775808 -o "$TMP/sh/x" "$TMP/small.txt"
check "... says the range" grep -q -- "--shard-tokens must be an integer, 1..2147483647" "$TMP/err"
check "... and writes nothing" [ -z "$(ls -A "$TMP/sh" | grep '^x')" ]
expect_exit "--shard-tokens 2147483648 (INT32_MAX + 1): 64" 64 $T --vocab byte --shard-tokens 2147483648 -o "$TMP/sh/x" "$TMP/small.txt"
expect_exit "--shard-tokens 4294967296: 64" 64 $T --vocab byte --shard-tokens 4294967296 -o "$TMP/sh/x" "$TMP/small.txt"
expect_exit "--shard-tokens 1e3: 64" 64 $T --vocab byte --shard-tokens 1e3 -o "$TMP/sh/x" "$TMP/small.txt"
expect_exit "--shard-tokens with --format ids: 64" 64 $T --vocab byte --shard-tokens 10 --format ids -o "$TMP/sh/x" "$TMP/small.txt"

# SIGTERM part way (the input a FIFO kept open): the temp file goes, the signal's status
mkdir -p "$TMP/sig"; mkfifo "$TMP/sig/in"
$T --vocab byte -o "$TMP/sig/out.bin" "$TMP/sig/in" & sigpid=$!
exec 3>"$TMP/sig/in"; head -c 100000 "$TMP/big.raw" >&3
for _ in $(seq 50); do [ -n "$(find "$TMP/sig" -name '.out.bin.tmp.*')" ] && break; sleep 0.1; done
seen=$(find "$TMP/sig" -name '.out.bin.tmp.*' | wc -l)
kill -TERM $sigpid; wait $sigpid; rc=$?; exec 3>&-
if  [ "$rc" = 143 ] && [ "$seen" = 1 ] && [ "$(ls -A "$TMP/sig")" = in ]; then ok "SIGTERM while encoding: status 143 (rc $rc), the temp file seen ($seen) and removed"; else notok "SIGTERM while encoding: status 143 (rc $rc), the temp file seen ($seen) and removed"; fi
# a full disk part way: 74, the old file kept, no temp file beside it
mkdir -p "$TMP/full"; echo old >"$TMP/full/out.bin"
LLM_FAULT_WRITE_LIMIT=100000 expect_exit "full disk while encoding is 74" 74 $T --vocab byte -o "$TMP/full/out.bin" "$TMP/big.raw"
check "... says no space left" grep -q "out.bin.*no space left on device" "$TMP/err"
LLM_FAULT_WRITE_LIMIT=100000 expect_exit "full disk while decoding is 74" 74 $T --vocab byte -d -o "$TMP/full/out.bin" "$TMP/big.bin"
if [ "$(cat "$TMP/full/out.bin")" = old ] && [ "$(ls -A "$TMP/full" | wc -l)" = 1 ]; then ok "... the old file kept, no temp file"; else notok "... the old file kept, no temp file"; fi
LLM_FAULT_WRITE_LIMIT=100000 expect_exit "full disk in --val-fraction is 74" 74 $T --vocab byte --val-fraction 0.5 -o "$TMP/full/pair" "$TMP/big.raw"
check "... leaves no pair" [ "$(ls -A "$TMP/full" | wc -l)" = 1 ]
# the pair is put in place by two renames: when the second fails, the first is undone
mkdir -p "$TMP/pair"
$T --vocab byte --val-fraction 0.5 -o "$TMP/pair/p" "$TMP/small.txt"
cp "$TMP/pair/p_train.bin" "$TMP/pair-old-train"; cp "$TMP/pair/p_val.bin" "$TMP/pair-old-val"
samepair() { cmp -s "$TMP/pair/p_train.bin" "$TMP/pair-old-train" && cmp -s "$TMP/pair/p_val.bin" "$TMP/pair-old-val" &&
  [ "$(ls -A "$TMP/pair" | tr '\n' ' ')" = "p_train.bin p_val.bin " ]; }
LLM_FAULT_RENAME=p_train.bin expect_exit "--val-fraction: train's rename fails (the second): 74" 74 $T --vocab byte --val-fraction 0.5 -o "$TMP/pair/p" "$TMP/big.raw"
check "... names the file" grep -q "rename to .*p_train.bin" "$TMP/err"
check "... the old pair is kept whole, val put back, nothing hidden left" samepair
LLM_FAULT_RENAME=p_val.bin expect_exit "--val-fraction: val's rename fails (the first): 74" 74 $T --vocab byte --val-fraction 0.5 -o "$TMP/pair/p" "$TMP/big.raw"
check "... the old pair is kept whole" samepair
LLM_FAULT_RENAME=q_train.bin expect_exit "--val-fraction, no old pair: train's rename fails: 74" 74 $T --vocab byte --val-fraction 0.5 -o "$TMP/pair/q" "$TMP/big.raw"
check "... leaves no val either" samepair
check "--val-fraction over an old pair" $T --vocab byte --val-fraction 0.5 -o "$TMP/pair/p" "$TMP/big.raw"
check "... replaces both" sh -c "[ \$(stat -c %s '$TMP/pair/p_train.bin') = $((1024 + 300000)) ] && [ \$(stat -c %s '$TMP/pair/p_val.bin') = $((1024 + 300000)) ]"

# ---- bad input, nothing half-written ----
printf 'garbage-not-a-token-file-0123456789' >"$TMP/garbage.bin"
expect_exit "garbage token file is 65" 65 $T --vocab byte -d "$TMP/garbage.bin"
head -c 1030 "$TMP/small.bin" >"$TMP/trunc.bin"
expect_exit "truncated token file is 65" 65 $T --vocab byte -d "$TMP/trunc.bin"
grep -q "tokens" "$TMP/err" && ok "size mismatch named" || notok "size mismatch named"
expect_exit "missing input is 66" 66 $T --vocab byte -o "$TMP/never.bin" "$TMP/missing.txt"
[ -z "$(ls -A "$TMP" | grep never)" ] && ok "no output, nor a temp file, after a missing input" || notok "no output after a missing input: $(ls -A "$TMP" | grep never)"
echo keep >"$TMP/keep.txt"
expect_exit "decode error keeps -o file" 65 $T --vocab byte -d -o "$TMP/keep.txt" "$TMP/garbage.bin"
[ "$(cat "$TMP/keep.txt")" = keep ] && ok "existing file untouched" || notok "existing file untouched"
printf "72 105\n10" >"$TMP/small.ids"
echo "1 2 x3" >"$TMP/badids.txt"
expect_exit "non-numeric ids are 65" 65 $T --vocab byte -d --format ids "$TMP/badids.txt"
echo "1 2 257" >"$TMP/bigid.txt"
expect_exit "id 257 for byte vocab is 65" 65 $T --vocab byte -d --format ids -o "$TMP/dec.txt" "$TMP/bigid.txt"
[ ! -e "$TMP/dec.txt" ] && ok "no decode output on a bad id" || notok "no decode output on a bad id"
out=$($T --vocab byte -d --format ids "$TMP/small.ids" "$TMP/bigid.txt" 2>"$TMP/err"); rc=$?
[ $rc = 65 ] && [ -z "$out" ] && grep -q "bigid.txt': byte 4: id 257 is out of range" "$TMP/err" &&
  ok "a bad id in the second input: 65, nothing on stdout, the byte named" ||
  notok "a bad id in the second input (rc $rc, ${#out} bytes out: $(head -c 200 "$TMP/err"))"
mkdir -p "$TMP/ro"
expect_exit "unwritable output is 74" 74 $T --vocab byte -o "$TMP/ro/no/such/dir.bin" "$TMP/small.txt"
[ -n "$(find "$TMP/ro" -name '*.tmp.*')" ] && notok "no temp file left" || ok "no temp file left"

# ---- scripts/get-data.sh ----
GD=$ROOT/scripts/get-data.sh
mkdir -p "$TMP/fakebin"
printf '#!/bin/sh\necho "curl: (6) Could not resolve host: example" >&2\nexit 6\n' >"$TMP/fakebin/curl"
chmod +x "$TMP/fakebin/curl"
(cd "$TMP" && env -u LLMKIT_DATA PATH="$TMP/fakebin:$PATH" "$GD" "$TMP/gd-off" >"$TMP/gd.out" 2>"$TMP/gd.err")
rc=$?
[ "$rc" = 69 ] && grep -q offline "$TMP/gd.err" && grep -q "resolve host" "$TMP/gd.err" &&
  ok "get-data offline: exit 69 with an explanation" || notok "get-data offline (rc $rc: $(head -c 300 "$TMP/gd.err"))"
ls -R "$TMP/gd-off" 2>/dev/null | grep -q 'part\|json\|txt' && notok "offline leaves no files" || ok "offline leaves no files"
check "... nor the folders it made" [ ! -e "$TMP/gd-off" ]
(cd "$TMP" && env -u LLMKIT_DATA "$GD" /proc/llmkit-nope >/dev/null 2>"$TMP/gd.err"); rc=$?
check "get-data to a folder it cannot make: exit 73 (rc $rc)" [ "$rc" = 73 ]
check "... each folder named once" [ "$(grep -c "/proc/llmkit-nope/gpt2'" "$TMP/gd.err")" = 1 ]
if have_data gpt2/encoder.json && have_data tinyshakespeare/input.txt; then
  LLMKIT_DATA=$DATA PATH="$TMP/fakebin:$PATH" "$GD" -q "$TMP/gd" 2>"$TMP/gd.err" &&
    cmp -s "$TMP/gd/gpt2/encoder.json" "$DATA/gpt2/encoder.json" &&
    cmp -s "$TMP/gd/tinyshakespeare/input.txt" "$DATA/tinyshakespeare/input.txt" &&
    ok "get-data copies from LLMKIT_DATA" || notok "get-data copies from LLMKIT_DATA ($(cat "$TMP/gd.err"))"
  LLMKIT_DATA=$TMP/gd $T --format ids </dev/null >/dev/null && ok "fetched data is usable" || notok "fetched data is usable"
else
  skip "get-data copy" "shared data not found"
fi
echo "1..$_n"
