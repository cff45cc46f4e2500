#!/usr/bin/env bash
# Replays the fuzzers' findings (tests/fuzz/regress/TARGET/*, see `make fuzz`) through the
# real programs, without the fuzzer runtime: each must end with a clean exit (0 when the
# input turned out valid, else 64/65/66 with a message), never a signal or a sanitizer
# report.  fuzz_ckpt's findings (tests/fuzz/regress/*) are replayed by tests/cli/shard.sh.
. "$(dirname "$0")/lib.sh"
PY=${PY:-python3}
REG=${FUZZ_REGRESS:-$ROOT/tests/fuzz/regress}

if ! command -v "$PY" >/dev/null; then
  skip "fuzz replay" "no python3"; echo "1..$_n"; exit 0
fi

# split FILE DIR NAME...: the parts of FILE (separated by "\n%%%%\n", as the fuzzers
# split them) into DIR/NAME...; NAME "-" drops a part.  Prints the number of parts.
split() {
  "$PY" - "$@" <<'P'
import os, sys
data = open(sys.argv[1], "rb").read()
d, names = sys.argv[2], sys.argv[3:]
parts = data.split(b"\n%%%%\n", len(names) - 1)
for name, p in zip(names, parts):
    if name != "-":
        open(os.path.join(d, name), "wb").write(p)
print(len(parts))
P
}

# hf_model DIR V: config.json and a zero model.safetensors of a 1-layer GPT-2 with vocab V
hf_model() {
  "$PY" - "$@" <<'P'
import json, os, struct, sys
d, V = sys.argv[1], int(sys.argv[2])
L, NH, C, T = 1, 2, 8, 8
json.dump({"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "n_positions": T,
           "vocab_size": V}, open(os.path.join(d, "config.json"), "w"))
shapes = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
for l in range(L):
    h = "h.%d." % l
    shapes += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]), (h + "attn.c_attn.weight", [C, 3 * C]),
               (h + "attn.c_attn.bias", [3 * C]), (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
               (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]), (h + "mlp.c_fc.weight", [C, 4 * C]),
               (h + "mlp.c_fc.bias", [4 * C]), (h + "mlp.c_proj.weight", [4 * C, C]), (h + "mlp.c_proj.bias", [C])]
shapes += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
hdr, off = {}, 0
for n, s in shapes:
    nb = 4
    for x in s:
        nb *= x
    hdr["transformer." + n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + nb]}
    off += nb
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + bytes(off))
P
}

# vocab_of FILE JSONPART: the vocabulary size the fuzzer derived (fuzz_hftok)
vocab_of() {
  "$PY" - "$@" <<'P'
import json, sys
data = open(sys.argv[1], "rb").read()
parts = data.split(b"\n%%%%\n", 2)
V = 257
try:
    j = json.loads(parts[0])
    v = j.get("model", {}).get("vocab") if len(parts) == 1 else j
    if isinstance(v, dict) and 0 < len(v) < (1 << 20):
        V = len(v)
except Exception:
    pass
print(V)
P
}

# a tiny model with the byte tokenizer (zero weights) for llm-infer
mkdir -p "$TMP/tiny"
hf_model "$TMP/tiny" 257
"$PY" - "$TMP/tiny" <<'P'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
v = {chr(c): b for b, c in zip(bs, cs)}
v["<|endoftext|>"] = 256
json.dump(v, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\n")
P
llm-shard convert --from safetensors "$TMP/tiny" -o "$TMP/tiny.llmk" 2>"$TMP/err" ||
  notok "tiny model for the replays: $(cat "$TMP/err")"
SAMPLE=$TMP/tiny.llmk

# net_client.py ADDR FILE: fuzz_net's clients against a real server (llm-infer --listen):
# the first byte of FILE picks the clients (1 + bits 0-1) and whether the last hangs up
# without reading (bit 2); part j of the rest (split at "\n%%%%\n") is sent by client
# j % clients.  Every client that listens must get one JSON response (with a
# finish_reason) per non-blank line it sent, and then the end of the connection.
cat >"$TMP/net_client.py" <<'P'
import json, socket, sys
addr, data = sys.argv[1], open(sys.argv[2], "rb").read()
if not data:
    sys.exit(0)
ncli, hangup = 1 + (data[0] & 3), (data[0] >> 2) & 1
parts = data[1:].split(b"\n%%%%\n", 15)
cl = []
for i in range(ncli):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(addr[5:])
    cl.append(s)
sent = [b""] * ncli
for j, p in enumerate(parts):
    cl[j % ncli].sendall(p)
    sent[j % ncli] += p
for s in cl:
    s.shutdown(socket.SHUT_WR)
if hangup and ncli > 1:
    cl[-1].close()
    cl = cl[:-1]
bad = 0
for i, s in enumerate(cl):
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    lines = sent[i].split(b"\n")
    want = 0
    for l in lines:
        body = l[:-1] if l.endswith(b"\r") else l
        if len(l) > 16 << 20 or body.strip(b" \t"):   # over-long lines get an error
            want += 1
    resp = got.split(b"\n")
    if resp[-1]:
        print("ERROR: client %d: a response without its newline" % i, file=sys.stderr); bad = 1
    for r in resp[:-1]:
        try:
            if not isinstance(json.loads(r).get("finish_reason"), str):
                raise ValueError("no finish_reason")
        except Exception as e:
            print("ERROR: client %d: not a response (%s): %r" % (i, e, r[:200]), file=sys.stderr); bad = 1
    if len(resp) - 1 != want:
        print("ERROR: client %d: %d request lines, %d responses" % (i, want, len(resp) - 1), file=sys.stderr); bad = 1
sys.exit(70 if bad else 0)
P

# replay NAME FILE CMD...: CMD must exit 0, 64, 65 or 66
bad=0; count=0
replay() {
  local name=$1 f=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err" <"${STDIN:-/dev/null}"; local rc=$?
  count=$((count + 1))
  [ -n "${FUZZ_REPLAY_VERBOSE:-}" ] && echo "# $name: $(basename "$f"): exit $rc $(head -c 200 "$TMP/err")"
  case $rc in
    0|64|65|66) ;;
    *) bad=$((bad + 1)); echo "# $name: $(basename "$f"): exit $rc: $(grep -m3 -E 'ERROR|SUMMARY|runtime error|llm-' "$TMP/err" | head -c 400)" ;;
  esac
}

# replay_ok NAME FILE CMD...: CMD must exit 0 (an oracle: the input was valid)
replay_ok() {
  local name=$1 f=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err" </dev/null; local rc=$?
  count=$((count + 1))
  [ -n "${FUZZ_REPLAY_VERBOSE:-}" ] && echo "# $name: $(basename "$f"): exit $rc $(head -c 200 "$TMP/err")"
  [ $rc = 0 ] || { bad=$((bad + 1)); echo "# $name: $(basename "$f"): exit $rc, want 0: $(head -c 300 "$TMP/err")"; }
}

for t in "$REG"/fuzz_*/; do
  t=$(basename "$t")
  files=("$REG/$t"/*)
  [ -e "${files[0]}" ] || continue
  bad=0; count=0
  for f in "${files[@]}"; do
    d=$TMP/case; rm -rf "$d"; mkdir -p "$d"
    case $t in
      fuzz_st)
        hf_model "$d" 260 && cp "$f" "$d/model.safetensors"
        replay "$t" "$f" llm-shard convert --from safetensors "$d" -o "$d/out.llmk" ;;
      fuzz_hf)
        k=$(split "$f" "$d" config.json model.safetensors p2 p3)
        [ "$k" = 3 ] && mv "$d/p2" "$d/tokenizer.json"
        [ "$k" = 4 ] && mv "$d/p2" "$d/vocab.json" && mv "$d/p3" "$d/merges.txt"
        replay "$t" "$f" llm-shard convert --from safetensors "$d" -o "$d/out.llmk" ;;
      fuzz_hftok)
        hf_model "$d" "$(vocab_of "$f")"
        k=$(split "$f" "$d" p0 p1 -)
        if [ "$k" = 1 ]; then mv "$d/p0" "$d/tokenizer.json"; else mv "$d/p0" "$d/vocab.json"; mv "$d/p1" "$d/merges.txt"; fi
        replay "$t" "$f" llm-shard convert --from safetensors "$d" -o "$d/out.llmk" ;;
      fuzz_llmc)
        replay "$t" "$f" llm-shard convert --from llmc "$f" -o "$d/out.llmk" ;;
      fuzz_export)   # what an exporter accepts must import back
        replay "$t" "$f" llm-shard convert --to llmc "$f" -o "$d/out.bin"
        [ -s "$d/out.bin" ] && replay_ok "$t" "$f" llm-shard convert --from llmc "$d/out.bin" -o "$d/back.llmk"
        replay "$t" "$f" llm-shard export --to safetensors "$f" -o "$d/hf"
        [ -s "$d/hf/config.json" ] && replay_ok "$t" "$f" llm-shard convert --from safetensors "$d/hf" -o "$d/back2.llmk" ;;
      fuzz_config)
        k=$(split "$f" "$d" c.yaml sets)
        args=()
        if [ "$k" = 2 ]; then
          while IFS= read -r l || [ -n "$l" ]; do args+=(--set "$l"); done <"$d/sets"
        fi
        replay "$t" "$f" llm-train --config "$d/c.yaml" "${args[@]}" --print-config ;;
      fuzz_tokfile)   # the last byte is the fuzzer's knob, not part of the file
        head -c -1 "$f" >"$d/in" && split "$d/in" "$d" tok.bin - >/dev/null
        replay "$t" "$f" llm-tokenize -d --vocab byte "$d/tok.bin"
        replay "$t" "$f" llm-infer "$SAMPLE" --device cpu -j 1 --eval "$d/tok.bin" --ctx 4 ;;
      fuzz_net)   # a server per finding; it must end cleanly on SIGTERM (exit 0)
        : >"$d/srv.log"
        llm-infer "$SAMPLE" --device cpu -j 1 -n 2 --seed 1 --listen unix:"$d/s.sock" 2>"$d/srv.log" & sp=$!
        for _ in $(seq 400); do grep -q 'listening on' "$d/srv.log" && break; kill -0 $sp 2>/dev/null || break; sleep 0.05; done
        replay "$t" "$f" timeout 120 "$PY" "$TMP/net_client.py" unix:"$d/s.sock" "$f"
        kill -TERM $sp; for _ in $(seq 200); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
        kill -0 $sp 2>/dev/null && kill -KILL $sp; wait $sp; src=$?; count=$((count + 1))
        [ $src = 0 ] || { bad=$((bad + 1)); echo "# $t: $(basename "$f"): the server ended with $src: $(grep -m3 -E 'ERROR|SUMMARY|runtime error|llm-' "$d/srv.log" | head -c 400)"; } ;;
      fuzz_jsonl)
        STDIN=$f replay "$t" "$f" llm-infer "$SAMPLE" --device cpu -j 1 --jsonl -n 2 --seed 1 ;;
      fuzz_tok)
        k=$(split "$f" "$d" encoder.json vocab.bpe text)
        [ "$k" = 3 ] || printf 'hello world' >"$d/text"
        replay "$t" "$f" llm-tokenize --vocab-dir "$d" -o "$d/out.bin" "$d/text" ;;
      fuzz_tokckpt)
        printf 'hello world, \xff\xfe caf\xc3\xa9 <|endoftext|> he ll' >"$d/text"
        replay "$t" "$f" llm-tokenize --vocab "$f" -o "$d/ids.bin" "$d/text" ;;
      fuzz_encode)
        if have_data gpt2/encoder.json; then
          replay "$t" "$f" llm-tokenize --vocab-dir "$DATA/gpt2" -o "$d/ids.bin" "$f"
          replay "$t" "$f" llm-tokenize -d --vocab-dir "$DATA/gpt2" -o "$d/back" "$d/ids.bin"
          cmp -s "$f" "$d/back" || { bad=$((bad + 1)); echo "# $t: $(basename "$f"): decode(encode(x)) != x"; }
          # through the fuzzer's window (1 + byte 1 % 64, --eot and --split-docs from byte 0's
          # bits 2 and 3): the ids of one piece
          set -- $(od -An -tu1 -N2 "$f") 0 0
          o=(); [ $(($1 & 4)) = 0 ] || o+=(--eot); [ $(($1 & 8)) = 0 ] || o+=(--split-docs)
          replay "$t" "$f" llm-tokenize "${o[@]}" --vocab-dir "$DATA/gpt2" -o "$d/w0.bin" "$f"
          replay "$t" "$f" env LLM_TOKENIZE_WINDOW=$((1 + $2 % 64)) llm-tokenize "${o[@]}" --vocab-dir "$DATA/gpt2" -o "$d/w.bin" "$f"
          cmp -s "$d/w0.bin" "$d/w.bin" || { bad=$((bad + 1)); echo "# $t: $(basename "$f"): the window changed the ids"; }
        fi ;;
      *) continue ;;
    esac
  done
  [ $bad = 0 ] && ok "$t: ${#files[@]} findings replay cleanly ($count runs)" || notok "$t: $bad of $count runs crashed or failed"
done
[ $_n = 0 ] && skip "fuzz replay" "no findings kept"
echo "1..$_n"
