#!/bin/bash
# llm-infer: seeded sampling, greedy, stop strings, JSONL (batch == single, bad lines,
# over-long prompts), plain-mode order, --eval, --stats, exit codes, closed stdout.
. "$(dirname "$0")/lib.sh"
PY=python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "llm-infer tests" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1

# a tiny byte-level model: a few training steps are enough for behaviour tests
tiny_data 300000
tiny_model 40

check "help" llm-infer --help
expect_exit "missing model: 66" 66 llm-infer nope.llmk -p hi
expect_exit "--seed -5: 64 (it was silently random)" 64 llm-infer "$M" -p hi --seed -5
expect_exit "--seed -9223372036854775808: 64 (INT64_MIN meant 'not given': it was silently random)" 64 \
  llm-infer "$M" -p hi --seed -9223372036854775808
expect_exit "--seed 12x: 64" 64 llm-infer "$M" -p hi --seed 12x
expect_exit "--seed 9223372036854775807: 0" 0 llm-infer "$M" -p hi -n 2 --seed 9223372036854775807
printf 'LLMK\0\r\n\032garbage' >bad.llmk
expect_exit "corrupt model: 65" 65 llm-infer bad.llmk -p hi
check "... the message names the file once" [ "$(grep -o bad.llmk "$TMP/err" | wc -l)" = 1 ]
head -c 2000 "$M" >trunc.llmk
expect_exit "truncated model: 65" 65 llm-infer trunc.llmk -p hi
expect_exit "-p with -f: 64" 64 llm-infer "$M" -p a -f b
expect_exit "bad --top-p: 64" 64 llm-infer "$M" -p a --top-p 0
# valid values beyond float's range still sample (the request failed, exit 65)
expect_exit "--temperature 1e300: 0" 0 llm-infer "$M" -p a -n 2 --temperature 1e300
expect_exit "--top-p 1e-50: 0" 0 llm-infer "$M" -p a -n 2 --top-p 1e-50
printf '%s\n' '{"prompt": "a", "max_tokens": 2, "temperature": 1e300}' '{"prompt": "a", "max_tokens": 2, "top_p": 1e-60}' |
  llm-infer "$M" --jsonl >fr.out 2>/dev/null
check "jsonl: temperature 1e300 and top_p 1e-60 sample" sh -c '[ "$(grep -c "\"finish_reason\":\"length\"" fr.out)" = 2 ]'
expect_exit "unknown --device: 64 (a bad value, not a missing device)" 64 llm-infer "$M" -p a --device tpu
expect_exit "missing prompt file: 66" 66 llm-infer "$M" -f nope.txt
# a weight of a dtype no device computes with: the file is wrong (65), not the device (69)
hedit "$M" i32.llmk '(?m)^(- name: wte\n  dtype: )f32$' '\g<1>i32'
expect_exit "wte stored as i32: 65" 65 llm-infer i32.llmk -p a -n 1
check "... names the dtype" grep -q "dtype i32 is not a weight dtype" "$TMP/err"
# -f reads at most 64 MiB (one byte more shows a larger file)
head -c 67108865 /dev/zero | tr '\0' a >big.txt
expect_exit "-f of 64 MiB + 1 byte: 65" 65 llm-infer "$M" -f big.txt -n 1
check "... says the limit" grep -q "larger than 64 MiB" "$TMP/err"
rm -f big.txt
expect_exit "--device cuda without inference kernels: 69" 69 llm-infer "$M" -p a --device cuda
# the default device, auto, on this machine (no GPU; a CUDA build too): the cpu, silently
llm-infer "$M" -p a -n 2 -v >/dev/null 2>dv.err
check "default device without a GPU: cpu" grep -q "device cpu," dv.err
llm-infer "$M" -p a -n 2 >/dev/null 2>dv.err
check "... with nothing on stderr" test ! -s dv.err

llm-infer "$M" -p "ROMEO:" -n 40 --seed 3 --temperature 0.8 >g1 2>err
check "generation runs" [ $? = 0 ] 
llm-infer "$M" -p "ROMEO:" -n 40 --seed 3 --temperature 0.8 >g2 2>/dev/null
llm-infer "$M" -p "ROMEO:" -n 40 --seed 4 --temperature 0.8 >g3 2>/dev/null
check "same seed, same text" cmp -s g1 g2
check "different seed, different text" sh -c "! cmp -s g1 g3"
check "40 tokens of bytes + newline" [ "$(wc -c <g1)" -ge 20 ] 
llm-infer "$M" -p "To be" -n 30 --temperature 0 --seed 1 >gr1 2>/dev/null
llm-infer "$M" -p "To be" -n 30 --temperature 0 --seed 2 --device cpu-ref >gr2 2>/dev/null
check "greedy ignores the seed; cpu == cpu-ref" cmp -s gr1 gr2
llm-infer "$M" -p "To be" -n 0 >n0 2>/dev/null
check "-n 0 prints an empty line" [ "$(cat n0)" = "" ] 

# --stop: text before the first occurrence only
llm-infer "$M" -p "KING" -n 60 --seed 5 --stop "e" >s1 2>/dev/null
check "--stop string not in the output" sh -c "! grep -q e s1"

cat >req.jsonl <<'J'
{"id": "a", "prompt": "First Citizen:", "max_tokens": 30, "temperature": 0.7, "seed": 1}
{"id": "b", "prompt": "KING", "max_tokens": 25, "temperature": 0.9, "seed": 2, "top_p": 0.9}

this is not json
{"id": 7, "tokens": [72, 101], "max_tokens": 20, "temperature": 0}
{"id": "long", "prompt": "0123456789012345678901234567890123456789012345678901234567890123456789", "max_tokens": 5}
{"id": "d", "prompt": "O", "max_tokens": 20, "temperature": 1.0, "top_k": 5, "seed": 4, "stop": ["\n", "x"]}
{"id": "ctx", "prompt": "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghij", "max_tokens": 50, "temperature": 0}
{"id": "e", "prompt": "hi", "bogus": 1}
J
llm-infer "$M" --jsonl --batch 1 <req.jsonl >r1.jsonl 2>/dev/null; rc1=$?
llm-infer "$M" --jsonl --batch 3 --stats <req.jsonl >r3.jsonl 2>stats; rc3=$?
check "--jsonl exits 0 with bad lines" [ "$rc1$rc3" = 00 ] 
$PY - r1.jsonl r3.jsonl stats <<'PY' >jres
import json, sys
def load(p):
    return {json.loads(l)["index"]: json.loads(l) for l in open(p)}
a, b = load(sys.argv[1]), load(sys.argv[2])
print("count", len(a) == 8 and len(b) == 8)
print("same", all(a[i]["text"] == b[i]["text"] and a[i]["tokens"] == b[i]["tokens"] for i in a))
print("badline", a[2]["finish_reason"] == "error" and "JSON" in a[2]["error"] and a[2]["id"] is None)
print("tokens", a[3]["id"] == 7 and a[3]["prompt_tokens"] == 2 and a[3]["finish_reason"] == "length" and a[3]["completion_tokens"] == 20)
print("long", a[4]["id"] == "long" and a[4]["finish_reason"] == "error" and "context" in a[4]["error"])
print("stop", a[5]["finish_reason"] in ("stop", "length") and "\n" not in a[5]["text"] and "x" not in a[5]["text"])
print("ctx", a[6]["finish_reason"] == "context" and a[6]["prompt_tokens"] + a[6]["completion_tokens"] == 65)
print("unknown", a[7]["finish_reason"] == "error" and "bogus" in a[7]["error"])
r = a[0]
print("fields", all(k in r for k in ("id","text","tokens","prompt_tokens","completion_tokens","finish_reason","ttft_ms","tokens_per_s")))
print("b", a[1]["id"] == "b" and a[1]["completion_tokens"] == 25 and a[1]["finish_reason"] == "length")
s = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
print("stats", all(k in s for k in ("prompt_tokens","completion_tokens","prefill_tokens_per_s","decode_tokens_per_s","ttft_ms","tpot_ms_mean","tpot_ms_p50","tpot_ms_p99")) and s["completion_tokens"] > 0)
PY
for k in count same badline tokens long stop ctx unknown fields b stats; do
  check "jsonl: $k" grep -qx "$k True" jres
done

# a request's "stop" replaces the --stop strings (keys left out take the command line's):
# --stop of a letter of its text changes nothing, nor do 16 of them
echo '{"prompt": "KING", "max_tokens": 40, "seed": 5, "stop": "zzz"}' >rs.jsonl
llm-infer "$M" --jsonl <rs.jsonl >rs1 2>/dev/null
c=$($PY -c 'import json, sys; print([x for x in json.load(open(sys.argv[1]))["text"] if x.isascii() and x.isalpha()][0])' rs1)
llm-infer "$M" --jsonl --stop "$c" <rs.jsonl >rs2 2>/dev/null
llm-infer "$M" --jsonl $(printf -- '--stop %s ' a b c d f g h i j k l m n o p q) <rs.jsonl >rs3 2>/dev/null
check "jsonl: a request's stop replaces --stop" $PY -c '
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(not (a["tokens"] == b["tokens"] == c["tokens"] and a["finish_reason"] == c["finish_reason"] != "error"))' rs1 rs2 rs3

# several stop strings: the text ends where the first of them starts, whatever their order
# (a new letter y after x: "y" listed before "xy" must still cut before x)
$PY - rs1 >rs4.jsonl <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["text"]
j = [i for i in range(1, len(t)) if t[i].isascii() and t[i].isalpha() and t[i] not in t[:i] and t[i - 1].isascii()][0]
print(json.dumps({"prompt": "KING", "max_tokens": 40, "seed": 5, "stop": [t[j], t[j - 1:j + 1]], "want": t[:j - 1]}))
PY
$PY -c 'import json, sys; d = json.loads(sys.stdin.read()); del d["want"]; print(json.dumps(d))' <rs4.jsonl | llm-infer "$M" --jsonl >rs5 2>/dev/null
check "jsonl: the earliest of several stop strings ends the text" $PY -c '
import json, sys
w, r = json.load(open(sys.argv[1]))["want"], json.load(open(sys.argv[2]))
sys.exit(not (r["text"] == w and r["finish_reason"] == "stop"))' rs4.jsonl rs5
# tokens keep the stop string's ids (byte model: the bytes of the text up to the end of
# the stop string that matched first, here one letter past the cut)
check "jsonl: tokens hold the stop string's ids, text does not" $PY -c '
import json, sys
w, r = json.load(open(sys.argv[1]))["want"], json.load(open(sys.argv[2]))
t = json.load(open(sys.argv[3]))["text"]
sys.exit(not (bytes(r["tokens"]) == t[:len(w) + 2].encode() and r["completion_tokens"] == len(r["tokens"])))' rs4.jsonl rs5 rs1

# --batch 4: a request is answered without waiting for more input (a client that waits
# for each response before sending the next got none); also when a blank line follows
# each request (it was taken as input and the wait for a request went on, stalling the
# decode).  interactive BLANK: 1 to send a blank line after each request
interactive() { $PY - "$M" "$1" <<'PY'
import json, select, subprocess, sys
p = subprocess.Popen(["llm-infer", sys.argv[1], "--jsonl", "--batch", "4"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
ok = True
for i in range(3):
    p.stdin.write(b'{"id": %d, "prompt": "KING", "max_tokens": 30}\n' % i + b'\n' * int(sys.argv[2]))
    p.stdin.flush()
    ok = ok and bool(select.select([p.stdout], [], [], 30)[0]) and json.loads(p.stdout.readline())["id"] == i
p.kill() if not ok else p.stdin.close()
p.wait()
print("interactive", ok)
PY
}
interactive 0 >inter.out 2>&1
check "jsonl --batch 4: each response before the next request" grep -qx "interactive True" inter.out
interactive 1 >inter2.out 2>&1
check "jsonl --batch 4: a blank line after a request does not hold it" grep -qx "interactive True" inter2.out

# plain mode: stdin lines answered in input order whatever the batch
printf 'KING\nQUEEN\n\nROMEO\n' >lines.txt
llm-infer "$M" -n 12 --seed 9 --batch 1 <lines.txt >p1 2>/dev/null
llm-infer "$M" -n 12 --seed 9 --batch 3 <lines.txt >p3 2>/dev/null
check "stdin prompts: batch 3 output == batch 1 output" cmp -s p1 p3
check "stdin prompts: 4 answers" [ "$(grep -c '' p1)" -ge 4 ] 
# plain mode: an over-long prompt is reported, the others answered, exit 65
printf 'KING\n%0100d\n' 0 >lines2.txt
llm-infer "$M" -n 5 <lines2.txt >p4 2>err4; rc=$?
if [ "$rc" = 65 ] && [ -s p4 ] && grep -q "prompt 2" err4; then ok "plain mode: over-long prompt exits 65 after the others"; else notok "plain mode: over-long prompt exits 65 after the others"; fi

# --eval
llm-infer "$M" --eval val.bin --ctx 64 --stride 64 >e.json 2>/dev/null
llm-infer "$M" --eval val.bin --ctx 64 --stride 32 >e2.json 2>/dev/null
$PY - e.json e2.json <<'PY' >eres
import json, math, sys
d = json.load(open(sys.argv[1])); d2 = json.load(open(sys.argv[2]))
print("eval", d["tokens"] == 29999 and abs(math.exp(d["nll"]) - d["ppl"]) < 1e-6 * d["ppl"] and d["nll"] < math.log(257))
print("stride", d2["tokens"] == 29999 and abs(math.exp(d2["nll"]) - d2["ppl"]) < 1e-6 * d2["ppl"] and d2["nll"] != d["nll"])
PY
check "--eval: every token scored once, ppl = exp(nll) < vocab" grep -qx "eval True" eres
check "--eval: overlapping windows score every token once too" grep -qx "stride True" eres
expect_exit "--eval of a missing file: 66" 66 llm-infer "$M" --eval nope.bin
expect_exit "--eval --ctx beyond the context: 64" 64 llm-infer "$M" --eval val.bin --ctx 65
# 0 in --ctx and --stride meant "not given": a typed 0 took the default (the model's
# context, the window) and was let through without --eval too
for a in "--ctx 0" "--stride 0" "--ctx -1" "--ctx 32 --stride 0"; do
  expect_exit "--eval $a: 64" 64 llm-infer "$M" --eval val.bin $a
  check "... it says why" grep -q -- "--ctx and --stride must be positive" "$TMP/err"
done
for a in "--ctx 0" "--stride 0" "--ctx 64"; do
  expect_exit "$a without --eval: 64" 64 llm-infer "$M" -p hi -n 1 $a
  check "... it says why" grep -q -- "--ctx and --stride go with --eval" "$TMP/err"
done

# a prompt whose text alone is too long for the context is refused before it is encoded
"$PY" -c "import json; print(json.dumps({'prompt': 'x' * 1000000, 'max_tokens': 2}))" >long.jsonl
llm-infer "$M" --jsonl <long.jsonl >long.out 2>/dev/null; rc=$?
check "a 1 MB prompt: refused by its length in bytes (exit $rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'prompt of 1000000 bytes exceeds the context (64 tokens of at most 1 bytes)' long.out"

# SIGTERM to a server waiting for input: it stops reading, answers what it holds and
# exits 130 (interrupted), having written every response it finished
mkfifo sig.fifo
llm-infer "$M" --jsonl --batch 2 <sig.fifo >sig.out 2>sig.err & sp=$!
exec 7>sig.fifo
printf '{"prompt":"A","max_tokens":5,"seed":1}\n{"prompt":"B","max_tokens":5,"seed":2}\n' >&7
for _ in $(seq 100); do [ "$(wc -l <sig.out)" -ge 2 ] && break; sleep 0.1; done
kill -TERM $sp
for _ in $(seq 100); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
kill -0 $sp 2>/dev/null && { kill -KILL $sp; notok "SIGTERM: still running after 10 s"; }
wait $sp; rc=$?
exec 7>&-
check "SIGTERM while waiting for input: exit 130 ($rc), two responses, 'interrupted' said" \
  sh -c "[ $rc = 130 ] && [ \$(grep -c '\"finish_reason\":\"length\"' sig.out) = 2 ] && grep -q interrupted sig.err"

# closed stdout: quiet
llm-infer "$M" -p "A" -n 500 2>pipe.err | head -c 1 >/dev/null
check "closed stdout is quiet" [ ! -s pipe.err ] 
echo "1..$_n"
