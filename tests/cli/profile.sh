#!/usr/bin/env bash
# llm-profile: per-op table and JSON in train/prefill/decode, Chrome trace, memory
# predicted vs measured, the planner (table, JSON, errors), peaks files, exit codes.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}
PK="--peak-gflops 50 --peak-gbs 10"   # fixed peaks: no measuring in tests

expect_exit "--help exits 0" 0 llm-profile --help
grep -q '^  plan ' "$TMP/out" && ok "--help lists plan" || notok "--help lists plan"
expect_exit "plan --help exits 0" 0 llm-profile plan --help
expect_exit "no model exits 64" 64 llm-profile
expect_exit "missing model exits 66" 66 llm-profile "$TMP/nope.llmk" $PK
expect_exit "bad mode exits 64" 64 llm-profile --config /dev/null --mode sideways
expect_exit "a negative --peak-gflops exits 64" 64 llm-profile --config /dev/null --peak-gflops -1
expect_exit "unknown device exits 64" 64 llm-profile "$TMP/nope.llmk" -d tpu

cat >"$TMP/cfg.yaml" <<Y
model: {arch: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
train: {batch_size: 2, seq_len: 16}
Y
llm-profile --config "$TMP/cfg.yaml" -j 1 $PK >"$TMP/p.txt" 2>"$TMP/err"
grep -qE '^matmul_forward +attn.c_attn +all ' "$TMP/p.txt" && grep -qE '^matmul_backward +lm_head ' "$TMP/p.txt" \
  && grep -qE '^adamw(_segs)? +optimizer ' "$TMP/p.txt" && ok "--config: table names matmul sites and the optimizer" \
  || notok "--config table: $(head -5 "$TMP/p.txt") $(cat "$TMP/err")"
grep -qE '^allocated +[0-9]+ +[0-9]+ +\(\+0\.00%' "$TMP/p.txt" && ok "memory: predicted equals measured allocations" \
  || notok "memory line: $(grep allocated "$TMP/p.txt")"
echo keep >"$TMP/keep.trace"
expect_exit "--trace on a full disk: 74" 74 env LLM_FAULT_WRITE_LIMIT=100 llm-profile --config "$TMP/cfg.yaml" -j 1 -s 1 -b 1 -t 16 $PK --trace "$TMP/keep.trace"
check "... the old trace file kept whole" [ "$(cat "$TMP/keep.trace")" = keep ]

grep -q '^device used' "$TMP/p.txt" && notok "cpu table has no device memory lines" || ok "cpu table has no device memory lines"
expect_exit "cuda without a GPU exits 69" 69 llm-profile --config "$TMP/cfg.yaml" -d cuda $PK
grep -q "no CUDA device\|no CUDA support\|not available in this build" "$TMP/err" && ok "cuda without a GPU says why" \
  || notok "cuda message: $(cat "$TMP/err")"
expect_exit "cuda peaks without a GPU exit 69" 69 llm-profile --config "$TMP/cfg.yaml" -d cuda

llm-profile --config "$TMP/cfg.yaml" -j 1 -s 2 $PK --json --per-layer >"$TMP/p.json" 2>"$TMP/err"
"$PY" - "$TMP/p.json" <<'P' && ok "--json: ops per layer, FLOP counts, memory within 10%" || notok "--json $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["mode"] == "train" and d["steps"] == 2 and d["batch"] == 2 and d["seq"] == 16
ops = d["ops"]
layers = {o["layer"] for o in ops if o["op"] == "matmul_forward" and o["site"] == "mlp.c_fc"}
assert layers == {0, 1}, layers
# matmul_forward of mlp.c_fc per layer: 2 steps x 2 N C 4C + N 4C (bias), N = 32, C = 32
fc = [o for o in ops if o["op"] == "matmul_forward" and o["site"] == "mlp.c_fc" and o["layer"] == 0][0]
N, C = 32, 32
assert fc["calls"] == 2
assert abs(fc["gflop"] * 1e9 - 2 * (2 * N * C * 4 * C + N * 4 * C)) < 1e-3, fc
assert all(o["bound"] in ("compute", "memory") for o in ops)
# roof%: the op's time at the peaks (50 GFLOP/s, 10 GB/s: $PK) over its time
for o in ops:
    if o["total_ms"] > 0:
        want = 100 * max(o["gflop"] / 50, o["gb"] / 10) / (o["total_ms"] / 1e3)
        assert abs(o["roof_pct"] - want) <= 1e-6 * max(want, 1e-3), (o, want)
assert sum(1 for o in ops if "roof_pct" in o) >= 10
assert abs(sum(o["pct"] for o in ops) - 100) < 1e-6
m = d["memory"]
assert abs(m["error_pct"]) < 10, m
assert m["measured"]["peak_rss"] > 0
assert sorted(m["measured"]) == ["allocated_peak", "peak_rss"], m["measured"]   # no device_* on the cpu
P
"$PY" - "$TMP/p.json" <<'P' && ok "--json: each residual fused with the next layernorm (ln_2, next ln_1, ln_f)" \
  || notok "--json fused residual: $(cat "$TMP/err")"
import json, sys
ops = json.load(open(sys.argv[1]))["ops"]
N, C = 32, 32
r = [o for o in ops if o["op"] == "residual_layernorm_forward"]
assert sorted((o["site"], o["layer"]) for o in r) == [("ln_1", 1), ("ln_2", 0), ("ln_2", 1), ("ln_f", -1)], r
# 2 steps x (the add N C + the layernorm 8 N C)
assert all(o["calls"] == 2 and abs(o["gflop"] * 1e9 - 2 * 9 * N * C) < 1e-3 for o in r), r
assert not [o for o in ops if o["op"] == "residual_forward"], "unfused residual"
ln = [(o["site"], o["layer"], o["calls"]) for o in ops if o["op"] == "layernorm_forward"]
assert ln == [("ln_1", 0, 2)], ln   # only layer 0's, after the embedding
P
# mixed precision: the lo ops with their formulas, sites per layer, the lo copy in memory
llm-profile --config "$TMP/cfg.yaml" -j 1 -s 2 $PK --precision bf16 >"$TMP/pb.txt" 2>"$TMP/err"
grep -qE '^matmul_forward_lo +attn.c_attn +all ' "$TMP/pb.txt" && grep -qE '^matmul_backward_lo +lm_head ' "$TMP/pb.txt" \
  && grep -qE '^adamw_segs +optimizer +all +2 ' "$TMP/pb.txt" && ! grep -qE '^(matmul|gelu|xent|attention)_(for|back)ward ' "$TMP/pb.txt" \
  && grep -qE '^layernorm_forward_lo +ln_2 +all ' "$TMP/pb.txt" && grep -qE '^matmul_forward_gelu_lo +mlp.c_fc +all ' "$TMP/pb.txt" \
  && grep -qE '^xent_fused ' "$TMP/pb.txt" && grep -qE '^attention_backward_lse ' "$TMP/pb.txt" \
  && ! grep -qE '^(layernorm|residual_layernorm)_forward ' "$TMP/pb.txt" \
  && grep -q 'precision bf16' "$TMP/pb.txt" && ok "--precision bf16: table lists the lo ops at their sites" \
  || notok "bf16 table: $(head -8 "$TMP/pb.txt") $(cat "$TMP/err")"
grep -qE '^allocated +[0-9]+ +[0-9]+ +\(\+0\.00%' "$TMP/pb.txt" && grep -qE '^  params_lo +([0-9]+) +\1 ' "$TMP/pb.txt" \
  && ok "bf16 memory: predicted equals measured, lo copy shown" || notok "bf16 memory: $(grep -A8 '^memory' "$TMP/pb.txt")"
llm-profile --config "$TMP/cfg.yaml" -j 1 -s 2 $PK --precision bf16 --json --per-layer --trace "$TMP/pb.trace" \
  >"$TMP/pb.json" 2>"$TMP/err"
"$PY" - "$TMP/pb.json" "$TMP/p.json" <<'P' && ok "bf16 --json: lo op counts equal the formulas; memory exact, below fp32's" || notok "bf16 --json $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["precision"] == "bf16" and d["steps"] == 2
ops = d["ops"]
def one(op, site, layer):
    r = [o for o in ops if o["op"] == op and o["site"] == site and o["layer"] == layer]
    assert len(r) == 1, (op, site, layer, r)
    return r[0]
def near(x, want):
    return abs(x - want) <= 1e-9 * max(1.0, abs(want))
N, C, L, V, Vp, T = 32, 32, 2, 257, 384, 32
fp32_ops = {"matmul_forward", "matmul_backward", "layernorm_forward", "residual_layernorm_forward",
            "residual_forward", "gelu_forward", "gelu_backward", "attention_forward", "attention_backward",
            "xent_forward", "xent_backward", "xent_forward_lo", "xent_backward_lo"}
assert not [o for o in ops if o["op"] in fp32_ops], [o["op"] for o in ops if o["op"] in fp32_ops]
names = {o["op"] for o in ops}
assert {"layernorm_forward_lo", "matmul_forward_gelu_lo", "matmul_backward_dgelu_lo", "xent_fused",
        "attention_forward_lse", "attention_backward_lse", "matmul_forward_lo",
        "matmul_backward_lo", "adamw_segs", "layernorm_backward_lo"} <= names, names
# the update writes the lo copy (adamw_segs): after the warm-up step no cast_lo remakes it
assert not names & {"cast_lo", "adamw"}, names
# the CPU backends fuse the GELU into c_fc's forward and c_proj's backward
assert not names & {"gelu_forward_lo", "gelu_backward_lo"}, names
for l in range(L):
    # lo inputs and weights 2 bytes an element, outputs 2 (lo) or 4 (fp32), written once;
    # per step: c_fc forward with its GELU into lo out and pre, bytes 2NC + 2(4C)C
    # + 2N(4C) (out) + 2N(4C) (pre) + 2(4C) (bias lo); flop + 8 per output (the GELU)
    f = one("matmul_forward_gelu_lo", "mlp.c_fc", l)
    assert f["calls"] == 2
    assert near(f["gflop"] * 1e9, 2 * (2 * N * C * 4 * C + N * 4 * C + 8 * N * 4 * C)), f
    assert near(f["gb"] * 1e9, 2 * (2 * N * C + 2 * 4 * C * C + 4 * N * 4 * C + 2 * 4 * C)), f
    # c_proj forward into the fp32 stream: 2N(4C) + 2C(4C) + 4NC + 4C
    f = one("matmul_forward_lo", "mlp.c_proj", l)
    assert near(f["gb"] * 1e9, 2 * (2 * N * 4 * C + 2 * C * 4 * C + 4 * N * C + 4 * C)), f
    # c_proj backward (OC = C, in = 4C) with the GELU backward, its input gradient lo:
    # dout 2NC + inp 2N(4C) + pre 2N(4C) + dinp 2N(4C) + w 2C(4C) + dw r/w 8C(4C)
    # + dbias r/w 8C; flop + 16 per dinp element
    b = one("matmul_backward_dgelu_lo", "mlp.c_proj", l)
    assert near(b["gflop"] * 1e9, 2 * (4 * N * 4 * C * C + N * C + 16 * N * 4 * C)), b
    assert near(b["gb"] * 1e9, 2 * (2 * N * C + 6 * N * 4 * C + 10 * C * 4 * C + 8 * C)), b
    # c_fc backward into the fp32 gradient of ln_2: dout 2N(4C) + inp 2NC + dinp 4NC + ...
    b = one("matmul_backward_lo", "mlp.c_fc", l)
    assert near(b["gb"] * 1e9, 2 * (2 * N * 4 * C + 6 * N * C + 10 * 4 * C * C + 8 * 4 * C)), b
    # ln_2 fused with the residual: a, b fp32 read, res fp32 written, out lo, w, bias, stats
    g = one("layernorm_forward_lo", "ln_2", l)
    assert near(g["gflop"] * 1e9, 2 * 9 * N * C), g
    assert near(g["gb"] * 1e9, 2 * (12 * N * C + 2 * N * C + 8 * C + 8 * N)), g
# ln_1 of layer 0 follows the embedding (no residual), the other one and ln_f are fused
g = one("layernorm_forward_lo", "ln_1", 0)
assert near(g["gb"] * 1e9, 2 * (4 * N * C + 2 * N * C + 8 * C + 8 * N)), g
one("layernorm_forward_lo", "ln_1", 1)
one("layernorm_forward_lo", "ln_f", -1)
# the classifier's loss and gradient in one pass: lo logits read once, written over
x = one("xent_fused", "", -1)
assert x["calls"] == 2 and near(x["gflop"] * 1e9, 2 * 7 * N * V), x
assert near(x["gb"] * 1e9, 2 * (2 * N * V + 2 * N * Vp + 8 * N)), x
# the tied output projection: no bias, OC = Vp, lo logits
h = one("matmul_forward_lo", "lm_head", -1)
assert near(h["gflop"] * 1e9, 2 * 2 * N * C * Vp), h
assert near(h["gb"] * 1e9, 2 * (2 * N * C + 2 * Vp * C + 2 * N * Vp)), h
P_ = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
c = one("adamw_segs", "optimizer", -1)   # adamw's 17 flop, 28 bytes + the 2-byte copy
assert c["calls"] == 2 and near(c["gflop"] * 1e9, 2 * 17 * P_) and near(c["gb"] * 1e9, 2 * 30 * P_), (c, P_)
assert abs(sum(o["pct"] for o in ops) - 100) < 1e-6
m = d["memory"]
assert m["predicted"]["params"] == 6 * P_ and m["predicted"]["params_lo"] == 2 * P_, m
assert m["measured"]["params_lo"] == 2 * P_, m   # the residual gradient's casts are not the lo copy
assert m["measured"]["allocated_peak"] == m["predicted"]["allocated"] and abs(m["error_pct"]) < 1e-9, m
m32 = json.load(open(sys.argv[2]))["memory"]
assert m["predicted"]["activations"] < m32["predicted"]["activations"], (m, m32)
P
"$PY" - "$TMP/pb.trace" "$TMP/pb.json" <<'P' && ok "bf16 --trace: op times inside the steps, adding up to the reported total" || notok "bf16 trace $(cat "$TMP/err")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
d = json.load(open(sys.argv[2]))
steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["ph"] == "X" and e["name"].startswith("step ")]
assert len(steps) == 2, steps
ops = [e for e in ev if e["ph"] == "X" and e.get("cat") in ("op", "memory")]
assert len(ops) > 50
for e in ops:
    assert any(a - 1 <= e["ts"] and e["ts"] + e["dur"] <= b + 1 for a, b in steps), e
tot = sum(e["dur"] for e in ops)
span = sum(b - a for a, b in steps)
assert 0 < tot <= span + len(ops) * 0.002, (tot, span)
assert abs(tot / 1e3 - d["ms_per_step"] * 2) <= 0.01 * tot / 1e3 + 0.01, (tot, d["ms_per_step"])
assert {"layernorm_forward_lo", "xent_fused", "matmul_backward_dgelu_lo"} <= {e["name"] for e in ops}
P
llm-profile --config "$TMP/cfg.yaml" -j 1 -s 2 $PK --precision fp16 --json >"$TMP/ph.json" 2>"$TMP/err"
"$PY" -c "
import json; d = json.load(open('$TMP/ph.json')); m = d['memory']
assert d['precision'] == 'fp16' and any(o['op'] == 'matmul_backward_lo' for o in d['ops'])
assert abs(m['error_pct']) < 1e-9 and m['measured']['params_lo'] == m['predicted']['params_lo'] > 0
" && ok "--precision fp16: lo ops, memory exact" || notok "fp16: $(cat "$TMP/err")"
printf 'model: {arch: gpt2, n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 16}\ntrain: {batch_size: 1, seq_len: 8, precision: bf16}\n' >"$TMP/cfgb.yaml"
llm-profile --config "$TMP/cfgb.yaml" -j 1 -s 1 $PK >"$TMP/pc.txt" 2>"$TMP/err" && grep -q 'precision bf16' "$TMP/pc.txt" \
  && grep -q '^matmul_forward_lo ' "$TMP/pc.txt" && ok "train.precision of --config is the default" || notok "config precision: $(head -2 "$TMP/pc.txt") $(cat "$TMP/err")"
llm-profile --config "$TMP/cfgb.yaml" -j 1 -s 1 $PK --precision fp32 >"$TMP/pc.txt" 2>"$TMP/err" && grep -q 'precision fp32' "$TMP/pc.txt" \
  && ! grep -q '^matmul_forward_lo ' "$TMP/pc.txt" && ok "--precision overrides the config" || notok "precision override: $(head -2 "$TMP/pc.txt")"
expect_exit "bad precision exits 64" 64 llm-profile --config "$TMP/cfg.yaml" --precision fp8 $PK
grep -q "precision 'fp8'" "$TMP/err" && ok "bad precision is named" || notok "bad precision message: $(cat "$TMP/err")"
expect_exit "precision outside train mode exits 64" 64 llm-profile --config "$TMP/cfg.yaml" --mode prefill --precision bf16 $PK
expect_exit "cpu-ref bf16 runs" 0 llm-profile --config "$TMP/cfgb.yaml" -d cpu-ref -j 1 -s 1 $PK --precision bf16

if command -v gnuplot >/dev/null; then
  "$ROOT/scripts/plot-roofline.sh" "$TMP/p.json" "$TMP/roof.png" >/dev/null 2>"$TMP/err" &&
    [ "$(head -c 4 "$TMP/roof.png" | od -An -c | tr -d ' ')" = '211PNG' ] && ok "plot-roofline.sh writes a PNG" ||
    notok "plot-roofline.sh: $(cat "$TMP/err")"
else
  skip "plot-roofline.sh" "gnuplot not installed"
fi

if [ -f "$DATA/tinyshakespeare/input.txt" ]; then
  if tiny_tokmodel; then
    expect_exit "train on a model file" 0 llm-profile "$M" -b 2 -t 32 -j 1 $PK
    grep -q '^matmul_backward ' "$TMP/out" && ok "model file: table names matmul" || notok "model file table"
    expect_exit "prefill" 0 llm-profile "$M" -b 2 -t 16 --mode prefill -j 1 $PK --json
    "$PY" - "$TMP/out" <<'P' && ok "prefill: matmul_rows, attention_rows; KV + activations match" || notok "prefill json"
import json, sys
d = json.load(open(sys.argv[1]))
names = {o["op"] for o in d["ops"]}
assert {"matmul_rows", "attention_rows", "kv_store", "embed_rows"} <= names, names
m = d["memory"]
assert m["predicted"]["kv_cache"] == 2 * 2 * 2 * 32 * 32 * 4, m
assert abs(m["error_pct"]) < 10, m
P
    llm-profile "$M" -b 2 -t 32 --mode decode --trace "$TMP/t.json" -j 1 $PK >"$TMP/d.txt" 2>"$TMP/err"
    "$PY" - "$TMP/t.json" <<'P' && ok "decode --trace: Chrome trace with op and token events" || notok "trace: $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) > 10
tokens = [e for e in x if e["name"].startswith("token ")]
assert len(tokens) == 16, len(tokens)              # T - T/2 decode steps
ops = [e for e in x if e.get("cat") == "op"]
assert all(e["dur"] >= 0 and "layer" in e["args"] for e in ops)
assert any(e["name"] == "attention_rows" for e in ops)
P
    grep -q 'mode decode' "$TMP/d.txt" && ok "decode table heading" || notok "decode table"
    # q4_0 weights: repacked for the fast kernels under the profiler too, byte counts as q4_0
    if llm-quantize "$M" "$TMP/q4.llmk" --type q4_0 2>"$TMP/err"; then
      for rp in 1 0; do
        LLM_Q4_REPACK=$rp llm-profile "$TMP/q4.llmk" -b 2 -t 32 --mode decode -j 1 $PK --json \
          >"$TMP/q$rp.json" 2>"$TMP/err" || notok "q4_0 decode profile (LLM_Q4_REPACK=$rp): $(cat "$TMP/err")"
      done
      "$PY" - "$TMP/q1.json" "$TMP/q0.json" <<'P' && ok "q4_0 decode profile: repacked when asked, same byte counts" || notok "q4_0 repack under the profiler"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["memory"]["measured"]["weights_repacked"] > 0, a["memory"]
assert b["memory"]["measured"]["weights_repacked"] == 0, b["memory"]
ga = sum(o["gb"] for o in a["ops"] if o["op"] == "matmul_rows")
gb = sum(o["gb"] for o in b["ops"] if o["op"] == "matmul_rows")
assert ga > 0 and abs(ga - gb) <= 1e-9 * gb, (ga, gb)
P
    else
      notok "llm-quantize q4_0: $(cat "$TMP/err")"
    fi
    expect_exit "decode past max_seq_len exits 64" 64 llm-profile "$M" -t 32 --mode decode -s 40 $PK
  else
    notok "tiny training failed: $(tail -c 300 "$TMP/err")"
  fi
else
  skip "model-file modes" "no shared data"
fi
expect_exit "decode needs a model file" 64 llm-profile --config "$TMP/cfg.yaml" --mode decode $PK

# peaks: measured once and saved, then read back
llm-profile --config "$TMP/cfg.yaml" -j 1 -s 1 --peaks "$TMP/peaks.json" --json >"$TMP/a.json" 2>/dev/null
"$PY" - "$TMP/peaks.json" "$TMP/a.json" <<'P' && ok "--peaks FILE: measured, saved as llm-bench JSON, used" || notok "--peaks"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
assert {r["benchmark"] for r in rows} == {"gemm", "mem"}
d = json.load(open(sys.argv[2]))
g = [r["rate"] for r in rows if r["benchmark"] == "gemm"][0]
assert d["peaks"]["gflops"] == g
P
# a peaks file that cannot be written whole is not left behind (a later run would read it)
mkdir "$TMP/pkd"
expect_exit "--peaks FILE on a full disk exits 74" 74 env LLM_FAULT_WRITE_LIMIT=100 \
  llm-profile --config "$TMP/cfg.yaml" -j 1 -s 1 --peaks "$TMP/pkd/peaks.json"
check "--peaks FILE on a full disk: no partial file" sh -c '[ -z "$(ls -A "$1")" ]' sh "$TMP/pkd"

# the planner
llm-profile plan --config "$TMP/cfg.yaml" --gpus 8 --zero 1 --json >"$TMP/plan.json" 2>"$TMP/err"
"$PY" - "$TMP/plan.json" <<'P' && ok "plan --json: every field; ZeRO-1 divides the optimizer by dp" || notok "plan json $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ["model", "gpus", "dp", "tp", "pp", "zero", "precision", "recompute", "batch", "seq", "bytes", "fits", "max_batch"]:
    assert k in d, k
b = d["bytes"]
P = d["params_per_device"]
assert d["dp"] == 8 and b["optimizer"] == P * 8 / 8 and b["params"] == P * 6 and b["grads"] == P * 4
assert abs(b["total"] - sum(b[k] for k in ["params", "grads", "optimizer", "activations", "kv_cache", "workspace"])) < 1
P
llm-profile plan --config "$TMP/cfg.yaml" --gpus 4 --tp 2 --gpu-mem 80G >"$TMP/plan.txt" 2>&1
grep -q 'fits in 80.00 GiB: yes; largest micro-batch that fits: [0-9]' "$TMP/plan.txt" && ok "plan table: fit verdict" \
  || notok "plan table: $(cat "$TMP/plan.txt")"
expect_exit "plan --mode infer" 0 llm-profile plan --config "$TMP/cfg.yaml" --mode infer --json
"$PY" -c "import json,sys; d=json.load(open('$TMP/out')); assert d['bytes']['kv_cache']>0 and d['bytes']['grads']==0" \
  && ok "plan infer: KV cache, no grads" || notok "plan infer"
expect_exit "plan without --config exits 64" 64 llm-profile plan --gpus 8
expect_exit "plan gpus not a multiple of tp*pp exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --gpus 6 --tp 4
expect_exit "plan bad precision exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --precision int3
expect_exit "plan bad zero exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --zero 5
expect_exit "plan bad gpu-mem exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --gpu-mem lots
expect_exit "plan missing config exits 66" 66 llm-profile plan --config "$TMP/none.yaml"
# the step-time model (GPU training plans only)
llm-profile plan --config "$TMP/cfg.yaml" --gpus 16 --zero 1 --json --mfu 0.5 --link-bw 100 --net-bw 10 \
  >"$TMP/pt.json" 2>"$TMP/err"
"$PY" - "$TMP/pt.json" <<'P' && ok "plan time: fields, network across nodes, ZeRO-1 volume" || notok "plan time $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1])); t = d["time"]
for k in ["peak_tflops", "mfu", "tokens_per_step", "compute_ms", "dp_comm_ms", "dp_exposed_ms",
          "tp_comm_ms", "pp_comm_ms", "bubble", "step_ms", "tokens_per_s", "comm_over_compute"]:
    assert k in t, k
P = d["params_per_device"]
assert t["dp_across_nodes"] and t["mfu"] == 0.5 and t["net_gbs"] == 10
assert abs(t["dp_comm_ms"] - 1e3 * 15 / 16 * 8 * P / 10e9) < 1e-9 * t["dp_comm_ms"]
assert abs(t["step_ms"] - (t["compute_ms"] + t["dp_comm_ms"])) < 1e-9 * t["step_ms"]
P
llm-profile plan --config "$TMP/cfg.yaml" --gpus 2 >"$TMP/pt.txt" 2>&1
grep -q '^step time' "$TMP/pt.txt" && grep -q 'tokens/s' "$TMP/pt.txt" && ok "plan table: step time" \
  || notok "plan table step time: $(cat "$TMP/pt.txt")"
llm-profile plan --config "$TMP/cfg.yaml" --device cpu --json >"$TMP/pt.json" 2>&1
"$PY" -c "import json; assert 'time' not in json.load(open('$TMP/pt.json'))" \
  && ok "plan on the CPU: no step-time model" || notok "plan cpu time"
expect_exit "plan --mfu 2 exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --mfu 2
expect_exit "plan --link-bw -1 exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --link-bw -1
expect_exit "plan --tp 65536 --pp 65536 (tp*pp overflows an int) exits 64, no SIGFPE" 64 \
  llm-profile plan --config "$TMP/cfg.yaml" --tp 65536 --pp 65536
# an option given as 0 or less is refused, not read as "the default"
for a in "--mfu 0" "--peak-tflops 0" "--link-bw 0" "--net-bw 0" "--gpus-per-node 0" "-b 0" "-b -3" "-t 0" "-t -1"; do
  expect_exit "plan $a exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --gpus 2 $a
done
expect_exit "plan -b 3 -t 8 --gpus-per-node 4 --mfu 0.3 runs" 0 llm-profile plan --config "$TMP/cfg.yaml" --gpus 2 -b 3 -t 8 --gpus-per-node 4 --mfu 0.3 --json
"$PY" -c "import json; d=json.load(open('$TMP/out')); assert d['batch']==3 and d['seq']==8 and d['time']['mfu']==0.3 and d['time']['gpus_per_node']==4" \
  && ok "plan: -b, -t, --gpus-per-node and --mfu taken" || notok "plan options: $(head -c 300 "$TMP/out")"
expect_exit "plan --global-batch not a multiple exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --gpus 2 --global-batch 7
# 0 in --global-batch meant "not given": a typed 0 took train.total_batch_tokens
for a in "--global-batch 0" "--global-batch -1"; do
  expect_exit "plan $a exits 64" 64 llm-profile plan --config "$TMP/cfg.yaml" --gpus 2 $a
  check "... it says it must be positive" grep -q -- "--global-batch ${a#* }: must be positive" "$TMP/err"
done
# profiling: 0 in --peak-gflops, --peak-gbs, -b, -t and --steps meant "not given" (the
# measured peaks, the config's batch and length, the mode's steps): a typed 0 is refused
for a in "--peak-gflops 0 --peak-gbs 10" "--peak-gflops 50 --peak-gbs 0"; do
  expect_exit "$a exits 64 (it was measured)" 64 llm-profile --config "$TMP/cfg.yaml" -j 1 -s 1 $a
  check "... it says they must be positive" grep -q -- "--peak-gflops and --peak-gbs must be positive" "$TMP/err"
  expect_exit "$a exits 64 before the model is read" 64 llm-profile "$TMP/nope.llmk" $a
done
for a in "-b 0" "-t 0" "--steps 0" "-s 1000001" "-b -1"; do
  expect_exit "$a exits 64 (0 was the default)" 64 llm-profile --config "$TMP/cfg.yaml" -j 1 $PK $a
  check "... it says why" grep -q -- "-b and -t must be >= 1, --steps in 1..1000000" "$TMP/err"
done
expect_exit "--warmup 0 runs (no untimed step)" 0 llm-profile --config "$TMP/cfg.yaml" -j 1 -s 1 -b 1 -t 8 --warmup 0 $PK
expect_exit "--warmup -1 exits 64" 64 llm-profile --config "$TMP/cfg.yaml" -j 1 $PK --warmup -1
printf 'model: {n_layer: [1]}\n' >"$TMP/bad.yaml"
printf 'model: {n_layer: 2}\ntrain: {lerning_rate: 1}\n' >"$TMP/bad2.yaml"
llm-profile plan --config "$TMP/bad.yaml" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 65 ] && ok "plan malformed config exits 65" || notok "plan malformed config: exit $rc"
printf 'model: {n_layer: 2, n_head: 3, n_embd: 32, vocab_size: 64, max_seq_len: 16}\n' >"$TMP/bad.yaml"
expect_exit "a model shape that does not fit (n_embd % n_head) exits 65, as llm-train" 65 \
  llm-profile plan --config "$TMP/bad.yaml"
expect_exit "llm-profile --config with an unknown key exits 65" 65 llm-profile --config "$TMP/bad2.yaml"
echo "1..$_n"
