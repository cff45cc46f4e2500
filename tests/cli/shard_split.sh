#!/usr/bin/env bash
# llm-shard split/merge from the command line: file names, shard sections, verify, the
# merged file identical to the source, and the refusals (exit 64 usage, 65 data).
. "$(dirname "$0")/lib.sh"
UNITDIR=${UNITDIR:-$ROOT/build/tests}
if [ ! -x "$UNITDIR/test_gguf" ]; then skip "split/merge" "no $UNITDIR/test_gguf (make units)"; exit 0; fi
M=$TMP/m.llmk
LLM_WRITE_FIXTURE=$M "$UNITDIR/test_gguf" >/dev/null 2>&1
check "fixture written" test -s "$M"

expect_exit "split --tp 2 --pp 2" 0 llm-shard split --tp 2 --pp 2 "$M" -o "$TMP/s"
check "4 shard files" test "$(ls "$TMP"/s-tp*-pp*.llmk | wc -l)" = 4
ok_all=1; for f in "$TMP"/s-tp*-pp*.llmk; do llm-shard verify -q "$f" || ok_all=0; done
check "every shard verifies" test $ok_all = 1
llm-shard info --json "$TMP/s-tp1-pp1.llmk" >"$TMP/info.json" 2>/dev/null
check "shard section: ranks, sizes, layer range" python3 -c '
import json,sys; s=json.load(open(sys.argv[1]))["shard"]
assert (s["tp_rank"],s["tp_size"],s["pp_rank"],s["pp_size"],s["layer_begin"],s["layer_end"])==(1,2,1,2,1,2), s
t={e["name"]:e for e in s["tensors"]}
q=t["h.1.attn.c_attn.weight"]; assert q["split"]=="rows" and q["parts"]==3 and (q["begin"],q["end"])==(32,64) and q["shape"]==[192,64], q
assert t["h.1.attn.c_proj.weight"]["split"]=="cols" and "h.1.attn.c_proj.bias" not in t
assert t["wte"]["split"]=="rows" and "ln_f.weight" in t and "wpe" not in t' "$TMP/info.json"
# merge, shards in any order: the same file
expect_exit "merge" 0 llm-shard merge "$TMP/s-tp1-pp1.llmk" "$TMP/s-tp0-pp0.llmk" "$TMP/s-tp1-pp0.llmk" "$TMP/s-tp0-pp1.llmk" -o "$TMP/back.llmk"
check "split + merge gives the source file byte for byte" cmp -s "$M" "$TMP/back.llmk"
expect_exit "split --tp 4 --pp-layers 1,1" 0 llm-shard split --tp 4 --pp-layers 1,1 "$M" -o "$TMP/u"
expect_exit "split into a prefix too long: 64" 64 llm-shard split --tp 2 "$M" -o "$TMP/$(printf 'a%.0s' $(seq 5000))"
check "... the output's fault: the model file is not named" sh -c "grep -q 'output prefix too long' '$TMP/err' && ! grep -q 'm.llmk' '$TMP/err'"
expect_exit "merge 8 shards to stdout" 0 sh -c "llm-shard merge $TMP/u-tp*-pp*.llmk -o - >$TMP/u.llmk"
check "tp 4 x pp 2 round trip through a pipe" cmp -s "$M" "$TMP/u.llmk"

expect_exit "n_head not divisible: 64" 64 llm-shard split --tp 3 "$M" -o "$TMP/x"
expect_exit "split into a directory that does not exist yet" 0 llm-shard split --tp 2 "$M" -o "$TMP/new/dir/t"
check "... the directory made, both shards in it" [ "$(ls "$TMP/new/dir" | tr '\n' ' ')" = "t-tp0-pp0.llmk t-tp1-pp0.llmk " ]
expect_exit "refused split (n_head): no directory made" 64 llm-shard split --tp 3 "$M" -o "$TMP/none/x"
check "... none" [ ! -e "$TMP/none" ]
grep -q "n_head 4 is not divisible by --tp 3" "$TMP/err" && ok "message names n_head" || notok "message names n_head: $(cat "$TMP/err")"
expect_exit "--pp > n_layer: 64" 64 llm-shard split --pp 3 "$M" -o "$TMP/x"
expect_exit "--pp-layers not adding up: 64" 64 llm-shard split --pp-layers 1,2 "$M" -o "$TMP/x"
expect_exit "--pp-layers malformed: 64" 64 llm-shard split --pp-layers 1,,1 "$M" -o "$TMP/x"
expect_exit "--pp and --pp-layers disagree: 64" 64 llm-shard split --pp 3 --pp-layers 1,1 "$M" -o "$TMP/x"
# 0 in --pp meant "not given": --pp 0 split into 1 stage, and with --pp-layers skipped
# the check that the counts agree
expect_exit "--pp 0: 64 (it was 1 stage)" 64 llm-shard split --pp 0 "$M" -o "$TMP/p0"
check "... it says --pp must be in 1..256" grep -q -- "--tp and --pp must be in 1..256" "$TMP/err"
check "... and writes no shard" sh -c "! ls '$TMP'/p0-* 2>/dev/null"
expect_exit "--pp 0 --pp-layers 1,1: 64 (the counts were not compared)" 64 llm-shard split --pp 0 --pp-layers 1,1 "$M" -o "$TMP/p0"
check "... it says they disagree" grep -q -- "--pp 0 but --pp-layers lists 2 stages" "$TMP/err"
expect_exit "--pp 2 --pp-layers 1,1 agree: 0" 0 llm-shard split --pp 2 --pp-layers 1,1 "$M" -o "$TMP/p2"
expect_exit "--pp 1 as the default: 0" 0 llm-shard split --tp 2 --pp 1 "$M" -o "$TMP/p1"
check "... 2 shard files" test "$(ls "$TMP"/p1-tp*-pp0.llmk | wc -l)" = 2
expect_exit "no -o: 64" 64 llm-shard split --tp 2 "$M"
expect_exit "splitting a shard: 65" 65 llm-shard split --tp 2 "$TMP/s-tp0-pp0.llmk" -o "$TMP/x"
expect_exit "merge with a shard missing: 65" 65 llm-shard merge "$TMP"/s-tp0-pp*.llmk "$TMP/s-tp1-pp0.llmk" -o "$TMP/x.llmk"
expect_exit "merge of two splits: 65" 65 llm-shard merge "$TMP"/s-tp0-pp0.llmk "$TMP/s-tp1-pp1.llmk" "$TMP/u-tp0-pp0.llmk" "$TMP/u-tp1-pp0.llmk" -o "$TMP/x.llmk"
expect_exit "merge of a non-shard: 65" 65 llm-shard merge "$M" -o "$TMP/x.llmk"
check "no partial output left" test ! -e "$TMP/x.llmk"
# a tampered shard section is caught
python3 - "$TMP/s-tp1-pp0.llmk" "$TMP/t-tp1-pp0.llmk" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
i = b.find(b"begin: 32")
b[i:i+9] = b"begin: 16"
open(sys.argv[2], "wb").write(b)
PY
expect_exit "merge with a wrong range: 65" 65 llm-shard merge "$TMP/s-tp0-pp0.llmk" "$TMP/t-tp1-pp0.llmk" "$TMP"/s-tp*-pp1.llmk -o "$TMP/x.llmk"
# a parameter whose shape does not fit the model section (same bytes, dimensions
# swapped) is refused before anything is written, not cut as if it were right
hedit "$M" "$TMP/swapped.llmk" '(name: h.0.mlp.c_fc.weight\n\s*dtype: f32\n\s*shape: )\[(\d+), (\d+)\]' '\g<1>[\3, \2]'
expect_exit "split of a model with a mis-shaped c_fc weight: 65" 65 llm-shard split --tp 2 "$TMP/swapped.llmk" -o "$TMP/sw/s"
check "... naming the tensor, no shard written" sh -c "grep -q 'h.0.mlp.c_fc.weight.*shape' '$TMP/err' && [ ! -e '$TMP/sw' ]"
# diagnostics name the file, once (llm-shard(1): one line naming the file, the problem
# and the tensor)
one() { # NAME FILE: $TMP/err is one line that names FILE exactly once
  if [ "$(wc -l <"$TMP/err")" = 1 ] && [ "$(grep -o "$2" "$TMP/err" | wc -l)" = 1 ]; then ok "$1"
  else notok "$1: $(cat "$TMP/err")"; fi
}
expect_exit "split --tp 3: 64" 64 llm-shard split --tp 3 "$M" -o "$TMP/x"; one "... names the model file" "$M"
echo junk >"$TMP/junk.llmk"
expect_exit "split of a non-.llmk file: 65" 65 llm-shard split --tp 2 "$TMP/junk.llmk" -o "$TMP/x"; one "... names it once" junk.llmk
expect_exit "merge of a non-.llmk file: 65" 65 llm-shard merge "$TMP/junk.llmk" -o "$TMP/x.llmk"; one "... names it once" junk.llmk
expect_exit "export --to gguf of a non-.llmk file: 65" 65 llm-shard export --to gguf "$TMP/junk.llmk" -o "$TMP/x.gguf"; one "... names it once" junk.llmk
expect_exit "export --to gguf of a shard: 65" 65 llm-shard export --to gguf "$TMP/s-tp0-pp0.llmk" -o "$TMP/x.gguf"; one "... names the shard and the tensor" "s-tp0-pp0.llmk: tensor '"
expect_exit "export --to safetensors of a shard: 65" 65 llm-shard export --to safetensors "$TMP/s-tp0-pp0.llmk" -o "$TMP/xd"; one "... names the shard and the tensor" "s-tp0-pp0.llmk: tensor '"
expect_exit "convert --to llmc of a shard: 65" 65 llm-shard convert --to llmc "$TMP/s-tp0-pp0.llmk" -o "$TMP/x.bin"; one "... names the shard and the tensor" "s-tp0-pp0.llmk: tensor '"
echo "1..$_n"
