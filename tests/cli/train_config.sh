#!/bin/bash
# llm-train config handling: the bad-config suite (tests/cli/configs/NAME.yaml with its
# exact message and exit status in NAME.expect), --set, --print-config, man page.
. "$(dirname "$0")/lib.sh"
CFG=$ROOT/tests/cli/configs

cd "$CFG" || exit 1
for y in *.yaml; do
  n=${y%.yaml}
  want_rc=$(head -1 "$n.expect")
  llm-train --config "$y" -o "$TMP/out" >"$TMP/out.txt" 2>"$TMP/err"; rc=$?
  if [ "$rc" = "$want_rc" ] && diff -q <(tail -n +2 "$n.expect") "$TMP/err" >/dev/null; then
    ok "config $n: exit $rc, $(tail -n +2 "$n.expect" | head -c 100)"
  else
    notok "config $n: exit $rc (want $want_rc): $(head -c 300 "$TMP/err")"
  fi
done
cd "$TMP" || exit 1

cat >"$TMP/good.yaml" <<Y
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: none.bin, tokenizer: byte}
train: {seq_len: 64, lr: 0.01}
Y
expect_exit "--set unknown key exits 64" 64 llm-train --config good.yaml --set train.lerning_rate=1
check "--set unknown key named" grep -qx "llm-train: --set 'train.lerning_rate=1': unknown key 'train.lerning_rate'" "$TMP/err"
expect_exit "--set bad value exits 64" 64 llm-train --config good.yaml --set train.batch_size=x
check "--set bad value named" grep -qx "llm-train: --set 'train.batch_size=x': 'train.batch_size' must be an integer, got 'x'" "$TMP/err"
expect_exit "--set without = exits 64" 64 llm-train --config good.yaml --set train.lr
expect_exit "--set cross-key error names --set" 65 llm-train --config good.yaml --set train.seq_len=65
check "cross-key error names --set" grep -qx "llm-train: --set: 'train.seq_len' (65) exceeds 'model.max_seq_len' (64)" "$TMP/err"
expect_exit "missing config exits 66" 66 llm-train --config nope.yaml
check "missing config named" grep -q "cannot open config 'nope.yaml'" "$TMP/err"
expect_exit "no --config exits 64" 64 llm-train
expect_exit "unknown option exits 64" 64 llm-train --config good.yaml --bogus
expect_exit "missing data file exits 66" 66 llm-train --config good.yaml -o "$TMP/o" -q
check "missing data file named" grep -q "none.bin" "$TMP/err"

# --print-config: file + overrides + defaults; it reads back as the same config
expect_exit "--print-config" 0 llm-train --config good.yaml --set train.max_steps=7 -o run7 --print-config
cp "$TMP/out" "$TMP/printed.yaml"
check "--print-config shows file, override and -o" grep -q "^  lr: 0.01$" "$TMP/printed.yaml"
check "--print-config shows the override" grep -q "^  max_steps: 7$" "$TMP/printed.yaml"
check "--print-config shows -o" grep -q "^  dir: run7$" "$TMP/printed.yaml"
check "--print-config shows defaults" grep -q "^  beta2: 0.95$" "$TMP/printed.yaml"
llm-train --config "$TMP/printed.yaml" --print-config >"$TMP/printed2.yaml" 2>"$TMP/err"
check "printed config reads back identically" cmp -s "$TMP/printed.yaml" "$TMP/printed2.yaml"
llm-train --print-config >"$TMP/defaults.yaml"
check "--print-config without --config gives the defaults" grep -q "^  n_layer: 12$" "$TMP/defaults.yaml"

# the man page documents every key and every option
MAN=$ROOT/man/man1/llm-train.1
if command -v mandoc >/dev/null; then
  check "man page lints" mandoc -Tlint -Werror "$MAN"
else
  skip "man page lints" "no mandoc"
fi
missing=""
sec=""
while IFS= read -r line; do
  case "$line" in
    [a-z]*:) sec=${line%:} ;;
    "  "*) k=${line#  }; k=${k%%:*}
           grep -q "^\.Ss $sec:" "$MAN" && grep -qx "\.It Cm $k" "$MAN" || missing="$missing $sec.$k" ;;
  esac
done <"$TMP/defaults.yaml"
if [ -z "$missing" ]; then ok "man page lists every config key"; else notok "man page lacks:$missing"; fi
opts=$(llm-train --help | grep -oE -- '--[a-z][a-z-]*' | sort -u)
mopts=$(grep -oE '^\.It Fl ([a-z] , )?-[a-z][a-z-]*' "$MAN" | grep -oE -- '-[a-z][a-z-]+$' | sed 's/^/-/' | sort -u)
if [ "$opts" = "$mopts" ]; then ok "man page lists exactly the --help options"; else notok "options differ: help [$(echo $opts)] man [$(echo $mopts)]"; fi
# an option that stands for a key is named in its error, not as a --set
expect_exit "--precision fp8: exit 64" 64 llm-train --config "$ROOT/scripts/demo.yaml" --precision fp8 --print-config
check "... the message names --precision" grep -q "^llm-train: --precision 'fp8': .*fp32|bf16|fp16" "$TMP/err"
# the shipped configs (the man pages' examples use them): valid, the shapes they name
for f in "$ROOT"/scripts/configs/*.yaml "$ROOT"/scripts/demo.yaml; do
  expect_exit "shipped config $(basename "$f") loads" 0 llm-train --config "$f" --print-config
done
llm-train --config "$ROOT/scripts/configs/gpt2-124m.yaml" --print-config >"$TMP/g.yaml" 2>&1
check "... gpt2-124m.yaml: 768 wide, 0.5M tokens per step" grep -q "total_batch_tokens: 524288" "$TMP/g.yaml"
expect_exit "llm-profile plan on gpt2-xl.yaml (the llm-profile(1) example)" 0 \
  llm-profile plan --config "$ROOT/scripts/configs/gpt2-xl.yaml" --gpus 8 --gpu-mem 80G --zero 1
check "... 1557.7M parameters" grep -q "1557.7M params" "$TMP/out"
echo "1..$_n"
