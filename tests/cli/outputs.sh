#!/bin/bash
# Output paths that are not plain new files.  The writers replace their output atomically
# (temp file beside it, rename): a character device or FIFO there must be written in
# place (a rename would replace /dev/null with a file, as root), a symbolic link must stay
# a link with the file it names replaced, a directory is an error.  Every writer:
# llm-quantize, llm-shard export (GGUF) and convert --to llmc, llm-tokenize -o and -d -o;
# llm-train --prom refuses a device or pipe (it is renamed over every step).
. "$(dirname "$0")/lib.sh"
if ! have_data tinyshakespeare/input.txt; then skip "output paths" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1
tiny_tokmodel || { notok "training a model: $(tail -c 300 "$TMP/err")"; echo "1..$_n"; exit 0; }
printf 'hello world\n' >hw.txt
# WRITER NAME: the command line with OUT where the output path goes
writers=(
  "quantize|llm-quantize $M OUT --type q8_0"
  "gguf|llm-shard export --to gguf $M -o OUT"
  "llmc|llm-shard convert --to llmc $M -o OUT"
  "tokenize|llm-tokenize --vocab byte -o OUT hw.txt"
  "detokenize|llm-tokenize -d --vocab byte -o OUT $TMP/tok.bin"
)
# (bounded: a writer that never opens a FIFO would leave its reader, and this test, waiting)
run_w() { local cmd=${1//OUT/$2}; timeout 120 $cmd >/dev/null 2>"$TMP/err"; }
for w in "${writers[@]}"; do
  name=${w%%|*} cmd=${w#*|}
  # the regular output, for comparison
  run_w "$cmd" "$name.ref" || notok "$name: regular output ($(head -c 200 "$TMP/err"))"
  # a FIFO: its reader gets exactly the regular file's bytes, the FIFO stays one
  mkfifo "$name.fifo"; timeout 120 cat "$name.fifo" >"$name.got" & rd=$!
  run_w "$cmd" "$name.fifo"; rc=$?; wait $rd
  if [ "$rc" = 0 ] && [ -p "$name.fifo" ]; then ok "$name to a FIFO: exit 0 (rc $rc), still a FIFO"; else notok "$name to a FIFO: exit 0 (rc $rc), still a FIFO"; fi
  check "... its reader got the same bytes as a file gets" cmp -s "$name.ref" "$name.got"
  # a symbolic link: the link stays, the file it names is replaced
  printf old >"$name.real"; ln -s "$name.real" "$name.lnk"
  run_w "$cmd" "$name.lnk"; rc=$?
  if  [ "$rc" = 0 ] && [ -L "$name.lnk" ] && cmp -s "$name.ref" "$name.real"; then ok "$name to a symlink: exit 0 (rc $rc), the link kept, its file written"; else notok "$name to a symlink: exit 0 (rc $rc), the link kept, its file written"; fi
  # a directory: an error, nothing in it
  mkdir "$name.dir"
  run_w "$cmd" "$name.dir"; rc=$?
  if [ "$rc" = 74 ] && [ -z "$(ls -A "$name.dir")" ]; then ok "$name to a directory: exit 74 (rc $rc), left empty"; else notok "$name to a directory: exit 74 (rc $rc), left empty"; fi
  # a character device (root only: mknod), /dev/null's numbers
  if [ "$(id -u)" = 0 ] && mknod -m 666 "$name.null" c 1 3 2>/dev/null; then
    run_w "$cmd" "$name.null"; rc=$?
    if [ "$rc" = 0 ] && [ -c "$name.null" ]; then ok "$name to a character device: exit 0 (rc $rc), still the device"; else notok "$name to a character device: exit 0 (rc $rc), still the device"; fi
  else
    skip "$name to a character device" "not root (mknod)"
  fi
done
# --prom is renamed over after every step: a device or pipe is refused at the start
mkfifo prom.fifo
expect_exit "llm-train --prom FIFO: exit 64 at the start" 64 llm-train --config "$TMP/train.yaml" -o p --prom prom.fifo
check "... says why" grep -q "device or pipe" "$TMP/err"
if [ -p prom.fifo ] && [ ! -e p ]; then ok "... still a FIFO, no checkpoint"; else notok "... still a FIFO, no checkpoint"; fi
printf old >real.prom; ln -s real.prom lnk.prom
expect_exit "llm-train --prom SYMLINK" 0 llm-train --config "$TMP/train.yaml" -o q --prom lnk.prom
if [ -L lnk.prom ] && grep -q '^llmkit_train_step ' real.prom; then ok "... the link kept, its file holds the metrics"; else notok "... the link kept, its file holds the metrics"; fi
echo "1..$_n"
