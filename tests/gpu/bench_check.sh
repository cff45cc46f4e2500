#!/bin/bash
# bench_check.sh — the GPU half of llm-bench and llm-profile, checked on a lent GPU.
#
# Usage: tests/gpu/bench_check.sh [BINDIR [OUTDIR [TOKENS.bin]]]
#   BINDIR   the llm-* programs (default: $BIN, else bin/ of this tree)
#   OUTDIR   JSON, traces, logs and report.txt (default: build/gpu-check/bench); when $OUT
#            names a directory (a lent machine's), the report, JSON and traces are copied
#            there too as bench-check-*
#   TOKENS   an llm.c token file with ids < 257 for the one-step training run that makes
#            the decode model (default: random tokens written with python3)
# Environment: LD_LIBRARY_PATH as the programs need it; BENCH_CHECK_BUDGET seconds
# (default 90); BENCH_CHECK_DEVICE=cpu runs the same steps on the CPU at tiny sizes (the
# plumbing and the validators, for the test suite: no GPU needed, timing checks INFO).
#
# Steps (device cuda):
#   1. llm-bench gemm: 4096^3 and 4099x2053x1031 for f32, tf32, bf16, f16 (rows checked:
#      schema, rate > 0, work = 2MNK, the output check's error within its bound)
#   2. llm-bench mem: copy, memcpy, triad, h2d, d2h at 256 MiB (schema, rate > 0, bytes)
#   2b. llm-bench allreduce over NCCL on a one-rank communicator, 8 B..256 MiB (x2): the
#      schema, out-of-place and in-place rows for every size, size = work, algbw = rate > 0,
#      busbw = algbw x 2(n-1)/n (0 at one rank: > 0 only with more), the result check
#      passed (wrong = 0 on every row)
#   3. llm-bench train and llm-profile train (--json --trace) on a 6-layer, 1024-wide
#      model, B=8 T=512: the profile's fields and rates; its op times summed per step
#      within 10% of the step time on the host clock (trace spans) and of llm-bench's
#      ms/step (a run without the profiler); device memory from cudaMemGetInfo present
#   4. one llm-train step writes that model; llm-bench infer and llm-profile --mode decode
#      (--json --trace), B=256, 128 decode tokens: fields and rates; op times per token
#      within 10% of the token spans (llm-bench's tpot, which also times the host's
#      greedy choice of each next token, is shown, not compared)
#   Event pairs around ops leave out the host's time between ops while the GPU waits for
#   it, so the 10% comparisons need work that keeps the GPU ahead of the host: hence the
#   model and batch sizes above (a small decode batch is launch-bound and would not be).
# Prints a table (check, result, detail) and writes it to OUTDIR/report.txt; the last line
# is "bench_check: N checks, N failed".  Exit 0 when nothing failed, 1 otherwise; without a
# GPU (llm-bench exits 69 with "no CUDA device") it prints "bench_check: no GPU: skipped"
# and exits 0.
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BINDIR=${1:-${BIN:-$HERE/bin}}
ODIR=${2:-$HERE/build/gpu-check/bench}
TOK=${3:-}
DEV=${BENCH_CHECK_DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$ODIR" || exit 1
ODIR=$(cd "$ODIR" && pwd)
LOG=$ODIR/log.txt
: >"$LOG"
T0=$(date +%s)
DEADLINE=$((T0 + ${BENCH_CHECK_BUDGET:-90}))
tl() { local left=$((DEADLINE - $(date +%s))); [ $left -lt 5 ] && left=5; [ $left -lt $1 ] && echo $left || echo $1; }
ROWS=()
FAILS=0
NCHK=0
row() {
  ROWS+=("$(printf '%-30s %-5s %s' "$1" "$2" "$3")")
  NCHK=$((NCHK + 1))
  [ "$2" = FAIL ] && FAILS=$((FAILS + 1))
  return 0
}
# run NAME TIMEOUT CMD...: stdout to $ODIR/NAME.out, stderr to $ODIR/NAME.err and the log
run() {
  local name=$1 t=$2; shift 2
  echo "+ $*" >>"$LOG"
  timeout "$(tl "$t")" "$@" >"$ODIR/$name.out" 2>"$ODIR/$name.err"
  local rc=$?
  cat "$ODIR/$name.err" >>"$LOG"
  echo "  exit $rc" >>"$LOG"
  return $rc
}
have_py() { command -v "$PY" >/dev/null 2>&1; }
# validate ARGS...: the python checks below; prints "PASS|FAIL|INFO detail" lines
validate() { "$PY" - "$@" 2>&1 <<'PY'
import json, math, sys

def out(kind, msg):
    print("%s %s" % (kind, msg))

def bench(path, device, bench_name, strict):
    rows = json.load(open(path))["results"]
    need = ["benchmark", "op", "device", "dtype", "shape", "threads", "ranks", "warmup", "reps",
            "time_min_s", "time_median_s", "time_max_s", "work", "rate", "unit", "peak_pct",
            "note", "commit", "host", "date"]
    if not rows:
        out("FAIL", "%s: no rows" % bench_name)
    for r in rows:
        name = "%s %s %s %s" % (r.get("benchmark"), r.get("op"), r.get("dtype"), r.get("shape"))
        bad = [k for k in need if k not in r]
        rate = r.get("rate")
        if not bad:
            if r["device"] != device: bad.append("device %s" % r["device"])
            if r["benchmark"] != bench_name: bad.append("benchmark")
            if not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)): bad.append("rate %r" % rate)
            if not (0 < r["time_min_s"] <= r["time_median_s"] <= r["time_max_s"]): bad.append("times")
            if bench_name == "gemm":
                d = dict(kv.split("=") for kv in r["shape"].split(","))
                if r["work"] != 2 * int(d["M"]) * int(d["N"]) * int(d["K"]): bad.append("work != 2MNK")
                if device == "cuda":
                    ce, cb = r.get("check_err"), r.get("check_bound")
                    if ce is None or cb is None or not (ce <= cb): bad.append("check_err %r > %r" % (ce, cb))
            if bench_name == "mem":
                b = int(r["shape"].split("=")[1])
                f = {"copy": 2, "memcpy": 2, "triad": 3, "h2d": 1, "d2h": 1}[r["op"]]
                if r["work"] != f * b: bad.append("work != %d x bytes" % f)
            pk = r["peak_pct"]
            if pk is not None and not (pk > 0): bad.append("peak_pct %r" % pk)
            if pk is not None and pk > 105 and strict: bad.append("peak_pct %.1f above the peak" % pk)
        pk = r.get("peak_pct")
        extra = ""
        if r.get("check_err") is not None: extra = ", check %.1e" % r["check_err"]
        msg = "%.5g %s%s%s" % (rate or 0, r.get("unit", "?"), " (%.1f%% of peak)" % pk if pk else "", extra)
        out("FAIL" if bad else "PASS", "%s: %s%s" % (name, msg, "; " + ", ".join(bad) if bad else ""))

def profile(path, trace, device, mode, ref_ms, strict):
    d = json.load(open(path))
    bad = []
    for k in ["mode", "device", "threads", "batch", "seq", "steps", "n_layer", "n_embd", "ms_per_step",
              "tokens_per_s", "peaks", "total_ms", "ops", "memory"]:
        if k not in d: bad.append("no %s" % k)
    if bad:
        out("FAIL", "profile %s: %s" % (mode, ", ".join(bad))); return
    if d["mode"] != mode: bad.append("mode %s" % d["mode"])
    if d["device"] != device: bad.append("device %s" % d["device"])
    if not d["tokens_per_s"] > 0: bad.append("tokens_per_s %r" % d["tokens_per_s"])
    if not d["ms_per_step"] > 0: bad.append("ms_per_step %r" % d["ms_per_step"])
    if not (d["peaks"]["gflops"] > 0 and d["peaks"]["gbs"] > 0): bad.append("peaks %r" % d["peaks"])
    ops = d["ops"]
    if not ops: bad.append("no ops")
    ofields = ["op", "site", "layer", "calls", "total_ms", "pct", "gflop", "gflops", "gb", "gbs", "intensity", "bound"]
    for o in ops:
        miss = [k for k in ofields if k not in o]
        if miss: bad.append("%s: no %s" % (o.get("op"), miss)); continue
        if not o["calls"] > 0: bad.append("%s calls" % o["op"])
        if (o["gflop"] > 0 or o["gb"] > 0) and not o["total_ms"] > 0: bad.append("%s %s: time %r" % (o["op"], o["site"], o["total_ms"]))
        if o["gflop"] > 0 and o["total_ms"] > 0 and not o["gflops"] > 0: bad.append("%s gflops" % o["op"])
    s = sum(o["total_ms"] for o in ops)
    if abs(s - d["total_ms"]) > 1e-6 * max(1.0, d["total_ms"]): bad.append("ops sum %.4f != total_ms %.4f" % (s, d["total_ms"]))
    if ops and abs(sum(o["pct"] for o in ops) - 100) > 1e-6: bad.append("pct sum")
    if abs(d["ms_per_step"] * d["steps"] - d["total_ms"]) > 1e-6 * max(1.0, d["total_ms"]): bad.append("ms_per_step x steps != total_ms")
    m = d["memory"]
    for k in ["params", "grads", "optimizer", "activations", "kv_cache", "workspace", "total", "allocated"]:
        if k not in m["predicted"]: bad.append("memory.predicted.%s" % k)
    meas = m["measured"]
    if not meas.get("allocated_peak", 0) > 0: bad.append("allocated_peak")
    if not meas.get("peak_rss", 0) > 0: bad.append("peak_rss")
    if device == "cuda":
        for k in ["device_used_before", "device_used_after", "device_used_delta", "device_used_peak", "device_total"]:
            if k not in meas: bad.append("memory.measured.%s missing" % k)
        if not bad and not (0 < meas["device_used_before"] <= meas["device_used_peak"] <= meas["device_total"]):
            bad.append("device memory %r" % meas)
        if not bad and not meas["device_used_delta"] > 0: bad.append("device_used_delta %r" % meas["device_used_delta"])
    mem = ("; device used %.0f MiB (+%.0f MiB), allocated %.0f MiB" %
           (meas["device_used_after"] / 2**20, meas["device_used_delta"] / 2**20, meas["allocated_peak"] / 2**20)
           if "device_used_after" in meas else "; allocated %.0f MiB" % (meas["allocated_peak"] / 2**20))
    out("FAIL" if bad else "PASS", "profile %s json: %d op rows, %.3f ms per %s, %.0f tokens/s%s%s" %
        (mode, len(ops), d["ms_per_step"], "step" if mode == "train" else "token", d["tokens_per_s"], mem,
         "; " + ", ".join(bad[:6]) if bad else ""))
    # the trace: spans (steps or tokens) and op events
    t = json.load(open(trace))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    spans = [e for e in ev if e.get("cat") == "span"]
    opev = [e for e in ev if e.get("cat") in ("op", "memory")]
    tb = []
    if len(spans) != d["steps"]: tb.append("%d spans for %d steps" % (len(spans), d["steps"]))
    if not opev: tb.append("no op events")
    if any(not (e["dur"] >= 0) for e in opev): tb.append("negative durations")
    if t.get("droppedEvents"): tb.append("%d events dropped" % t["droppedEvents"])
    span_ms = sum(e["dur"] for e in spans) / 1e3
    op_ms = sum(e["dur"] for e in opev) / 1e3
    if not tb and abs(op_ms - d["total_ms"]) > 1e-3 * max(1.0, d["total_ms"]): tb.append("trace ops %.3f ms != total_ms %.3f" % (op_ms, d["total_ms"]))
    out("FAIL" if tb else "PASS", "profile %s trace: %d spans, %d op events%s" % (mode, len(spans), len(opev), "; " + ", ".join(tb) if tb else ""))
    if spans:
        cov = op_ms / span_ms if span_ms > 0 else 0
        ok = abs(cov - 1) <= 0.10
        out("PASS" if ok else ("FAIL" if strict else "INFO"),
            "profile %s: ops %.3f ms of %.3f ms in spans (%.1f%%, bound 90-110%%)" % (mode, op_ms, span_ms, 100 * cov))
    if ref_ms is not None:
        r = d["ms_per_step"] / ref_ms if ref_ms > 0 else 0
        ok = abs(r - 1) <= 0.10
        out("PASS" if ok else ("FAIL" if strict else "INFO"),
            "profile %s: %.3f ms/step vs llm-bench %.3f (%.1f%%, bound 90-110%%)" % (mode, d["ms_per_step"], ref_ms, 100 * r))

def coll(path, device, name, lo, hi):
    rows = json.load(open(path))["results"]
    need = ["benchmark", "op", "device", "dtype", "shape", "threads", "ranks", "warmup", "reps",
            "time_min_s", "time_median_s", "time_max_s", "work", "rate", "unit", "peak_pct",
            "note", "commit", "host", "date", "size", "count", "time_us", "algbw", "busbw"]
    if device == "cuda": need.append("wrong")
    bad, sizes = [], {}
    for r in rows:
        miss = [k for k in need if k not in r]
        if miss: bad.append("missing %s" % miss); continue
        n = r["ranks"]
        f = {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1.0) / n, "reducescatter": (n - 1.0) / n, "broadcast": 1.0}[name]
        tag = "%s %s" % (r["op"], r["shape"])
        if r["device"] != device or r["benchmark"] != name: bad.append("%s: device/benchmark" % tag)
        if not (r["rate"] > 0 and math.isfinite(r["rate"]) and 0 < r["time_min_s"] <= r["time_median_s"] <= r["time_max_s"]): bad.append("%s: rate/times" % tag)
        if not (r["size"] == r["work"] == int(r["shape"].split("=")[1])): bad.append("%s: size != work" % tag)
        if r["algbw"] != r["rate"] or abs(r["busbw"] - r["algbw"] * f) > 1e-9 * r["algbw"]: bad.append("%s: algbw/busbw" % tag)
        if n > 1 and not r["busbw"] > 0: bad.append("%s: busbw %r" % (tag, r["busbw"]))
        if device == "cuda" and (r["wrong"] != 0 or r["threads"] != 0): bad.append("%s: wrong %r" % (tag, r["wrong"]))
        sizes.setdefault(r["size"], set()).add(r["op"])
    want = []
    s = lo
    while s <= hi: want.append(s); s *= 2
    if sorted(sizes) != want: bad.append("sizes %s, want %d..%d x2" % (sorted(sizes)[:4], lo, hi))
    if device == "cuda" and any(v != {"out-of-place", "in-place"} for v in sizes.values()): bad.append("not both ops for every size")
    big = [r for r in rows if "size" in r and r["size"] == max(sizes or [0])]
    small = [r for r in rows if "size" in r and r["size"] == min(sizes or [0])]
    desc = "; ".join("%s %.4g GB/s algbw, busbw %.4g" % (r["op"], r["algbw"], r["busbw"]) for r in big)
    out("FAIL" if bad else "PASS", "%d rows, %d sizes, ranks %s%s; at %d B: %s%s" % (
        len(rows), len(sizes), sorted({r.get("ranks") for r in rows}),
        (", result check passed (wrong 0)" if all(r.get("wrong") == 0 for r in rows) else ", WRONG results") if device == "cuda" else "",
        max(sizes or [0]), desc, "; " + ", ".join(bad[:6]) if bad else ""))
    if small:
        out("INFO", "at %d B: %s" % (small[0]["size"], "; ".join("%s %.1f us" % (r["op"], r["time_us"]) for r in small)))

def bench_value(path, key, op=None):
    rows = json.load(open(path))["results"]
    for r in rows:
        if op is None or r["op"] == op:
            print(r[key]); return

cmd = sys.argv[1]
try:
    if cmd == "bench":
        bench(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1")
    elif cmd == "profile":
        ref = float(sys.argv[6]) if sys.argv[6] else None
        profile(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], ref, sys.argv[7] == "1")
    elif cmd == "coll":
        coll(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif cmd == "value":
        bench_value(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif cmd == "tokens":   # an llm.c token file (version 1) of random ids < 257
        import random, struct
        random.seed(5)
        n = int(sys.argv[3])
        with open(sys.argv[2], "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack("<%dH" % n, *[random.randrange(257) for _ in range(n)]))
except Exception as e:
    out("FAIL", "%s: %s: %s" % (cmd, type(e).__name__, e))
PY
}
# add_rows PREFIX: the validator's lines as rows
add_rows() {
  local kind msg
  while read -r kind msg; do
    case $kind in PASS|FAIL|INFO|SKIP) row "$1" "$kind" "$msg" ;; *) row "$1" FAIL "validator: $kind $msg" ;; esac
  done
}
finish() {
  {
    echo "bench_check: device $DEV, $( [ -n "${GPU_NAME:-}" ] && echo "$GPU_NAME, " )$(( $(date +%s) - T0 )) s"
    printf '%-30s %-5s %s\n' "check" "result" "detail"
    for r in "${ROWS[@]}"; do echo "$r"; done
    echo "bench_check: $NCHK checks, $FAILS failed"
  } >"$ODIR/report.txt"
  cat "$ODIR/report.txt"
  # on a lent machine ($OUT comes back): the report, JSON and traces
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && [ "$OUT" != "$ODIR" ]; then
    for f in report.txt log.txt gemm_*.out mem.out allreduce.out train_profile.json train_trace.json decode_profile.json decode_trace.json; do
      for g in "$ODIR"/$f; do [ -f "$g" ] && cp "$g" "$OUT/bench-check-$(basename "$g")"; done
    done
  fi
  [ "$FAILS" = 0 ]
  exit $?
}

export PATH="$BINDIR:$PATH"
for p in llm-bench llm-profile; do
  [ -x "$BINDIR/$p" ] || { echo "bench_check: no $BINDIR/$p" >&2; row "programs" FAIL "no $BINDIR/$p"; finish; }
done
STRICT=1
if [ "$DEV" = cuda ]; then
  SIZES=4096,4099x2053x1031 DTYPES=f32,tf32,bf16,f16 MEMSIZE=256M
  L=6 C=1024 NH=16 V=8192 MAXT=512 TB=8 TT=512 DB=256 DT=256
else   # plumbing on the CPU: tiny sizes, timing comparisons INFO only
  SIZES=64,33x17x9 DTYPES=f32 MEMSIZE=1M
  L=2 C=64 NH=2 V=512 MAXT=64 TB=2 TT=32 DB=2 DT=32
  STRICT=0
fi

# 0. is there a GPU?
run probe 60 llm-bench gemm --sizes 64 --dtype f32 -r 1 -w 0 -d "$DEV" -F json
rc=$?
if [ $rc = 69 ] && grep -q "no CUDA device\|not available in this build" "$ODIR/probe.err"; then
  echo "bench_check: no GPU: skipped ($(head -c 200 "$ODIR/probe.err"))"
  exit 0
fi
have_py || row "validators" SKIP "no $PY: exit codes only"
GPU_NAME=$(have_py && "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['results'][0]['note'].split(' (')[0])" "$ODIR/probe.out" 2>/dev/null)

# 1. GEMMs --------------------------------------------------------------------------
# one run per dtype: a dtype cuBLASLt refuses does not hide the others
for dt in ${DTYPES//,/ }; do
  if run "gemm_$dt" 60 llm-bench gemm --sizes "$SIZES" --dtype "$dt" -r 5 -w 2 -d "$DEV" -F json; then
    if have_py; then add_rows "gemm $dt" < <(validate bench "$ODIR/gemm_$dt.out" "$DEV" gemm $STRICT)
    else row "gemm $dt" PASS "exit 0 (not validated)"; fi
  else
    rc=$?; row "gemm $dt" FAIL "exit $rc: $(tail -c 300 "$ODIR/gemm_$dt.err")"
  fi
done

# 2. memory bandwidth ---------------------------------------------------------------
if run mem 60 llm-bench mem --size "$MEMSIZE" -r 5 -w 2 -d "$DEV" -F json; then
  if have_py; then add_rows "mem" < <(validate bench "$ODIR/mem.out" "$DEV" mem $STRICT)
  else row "mem" PASS "exit 0 (not validated)"; fi
else
  rc=$?; row "mem" FAIL "exit $rc: $(tail -c 300 "$ODIR/mem.err")"
fi

# 2b. allreduce over NCCL, one rank (cpu: the local copy path, tiny) ------------------
CMAX=$([ "$DEV" = cuda ] && echo 268435456 || echo 4096)
if run allreduce 60 llm-bench allreduce -b 8 -e "$CMAX" -f 2 -r 5 -w 2 -d "$DEV" -F json; then
  if have_py; then add_rows "allreduce" < <(validate coll "$ODIR/allreduce.out" "$DEV" allreduce 8 "$CMAX")
  else row "allreduce" PASS "exit 0 (not validated)"; fi
else
  rc=$?; row "allreduce" FAIL "exit $rc: $(tail -c 300 "$ODIR/allreduce.err")"
fi

if ! have_py; then finish; fi

# 3. training: llm-bench (no profiler) and llm-profile ---------------------------------
if [ -n "$TOK" ] && [ -f "$TOK" ]; then cp "$TOK" "$ODIR/tokens.bin"
else add_rows "tokens" < <(validate tokens "$ODIR/tokens.bin" 200000); fi
cat >"$ODIR/model.yaml" <<Y
model: {arch: gpt2, n_layer: $L, n_head: $NH, n_embd: $C, vocab_size: $V, max_seq_len: $MAXT}
data: {train: $ODIR/tokens.bin, tokenizer: byte}
train: {batch_size: $TB, seq_len: $TT, max_steps: 1, warmup_steps: 1, save_every: 100000, device: $DEV, eval_every: 0}
Y
ref=
if run train_bench 60 llm-bench train --config "$ODIR/model.yaml" -b $TB -s $TT -r 3 -w 1 -d "$DEV" -F json; then
  ref=$(validate value "$ODIR/train_bench.out" ms_per_step)
  row "train llm-bench" INFO "$(printf '%.3f ms/step, %.0f tokens/s (no profiler)' "$ref" "$(validate value "$ODIR/train_bench.out" rate)")"
else
  rc=$?; row "train llm-bench" FAIL "exit $rc: $(tail -c 300 "$ODIR/train_bench.err")"
fi
if run train_prof 60 llm-profile --config "$ODIR/model.yaml" -b $TB -t $TT -s 3 -w 1 -d "$DEV" --json \
     --trace "$ODIR/train_trace.json"; then
  cp "$ODIR/train_prof.out" "$ODIR/train_profile.json"
  add_rows "profile train" < <(validate profile "$ODIR/train_profile.json" "$ODIR/train_trace.json" "$DEV" train "${ref}" $STRICT)
else
  rc=$?; row "profile train" FAIL "exit $rc: $(tail -c 300 "$ODIR/train_prof.err")"
fi

# 4. decode: a model file from one training step, then llm-bench infer and llm-profile --
rm -rf "$ODIR/run"
if run make_model 90 llm-train --config "$ODIR/model.yaml" -o "$ODIR/run" && M=$(ls "$ODIR"/run/*.llmk 2>/dev/null | sort | tail -1) && [ -n "$M" ]; then
  P=$((DT / 2))
  if run infer_bench 60 llm-bench infer "$M" -b $DB -s $P --gen 16 -r 2 -w 1 -d "$DEV" -F json; then
    row "decode llm-bench" INFO "$(printf 'tpot %.3f ms (with the host'"'"'s greedy pick), %.0f tokens/s' \
      "$(validate value "$ODIR/infer_bench.out" tpot_ms decode)" "$(validate value "$ODIR/infer_bench.out" rate decode)")"
  else
    rc=$?; row "decode llm-bench" FAIL "exit $rc: $(tail -c 300 "$ODIR/infer_bench.err")"
  fi
  if run decode_prof 60 llm-profile "$M" --mode decode -b $DB -t $DT -d "$DEV" --json --trace "$ODIR/decode_trace.json"; then
    cp "$ODIR/decode_prof.out" "$ODIR/decode_profile.json"
    add_rows "profile decode" < <(validate profile "$ODIR/decode_profile.json" "$ODIR/decode_trace.json" "$DEV" decode "" $STRICT)
  else
    rc=$?; row "profile decode" FAIL "exit $rc: $(tail -c 300 "$ODIR/decode_prof.err")"
  fi
else
  row "decode model" FAIL "llm-train for the decode model failed: $(tail -c 300 "$ODIR/make_model.err")"
fi
rm -rf "$ODIR/run"
finish
