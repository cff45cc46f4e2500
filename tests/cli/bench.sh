#!/usr/bin/env bash
# llm-bench: every subcommand at tiny sizes; the schema of every format (never speed);
# nccl-tests arithmetic on the single-rank path; errors and exit codes.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}

# schema FILE FORMAT [EXPR]: every row has every field; EXPR (python, per row r) holds
schema() {
  "$PY" - "$@" <<'P'
import json, sys
path, fmt = sys.argv[1], sys.argv[2]
expr = sys.argv[3] if len(sys.argv) > 3 else "True"
txt = open(path).read()
rows = json.loads(txt)["results"] if fmt == "json" else [json.loads(l) for l in txt.splitlines()]
need = ["benchmark", "op", "device", "dtype", "shape", "threads", "ranks", "warmup", "reps",
        "time_min_s", "time_median_s", "time_max_s", "work", "rate", "unit", "peak_pct",
        "note", "commit", "host", "cpu", "date"]
assert rows, "no rows"
for r in rows:
    miss = [k for k in need if k not in r]
    assert not miss, "missing %s in %s" % (miss, r)
    assert r["time_min_s"] <= r["time_median_s"] <= r["time_max_s"], r
    assert eval(expr), "%s fails on %s" % (expr, r)
print(len(rows))
P
}

expect_exit "--help exits 0" 0 llm-bench --help
for c in gemm mem allreduce allgather reducescatter broadcast train infer; do
  grep -q "^  $c " "$TMP/out" || { notok "--help lists $c"; continue; }
done
ok "--help lists every subcommand"
expect_exit "gemm --help" 0 llm-bench gemm --help

llm-bench gemm --sizes 16,8x12x4 --dtype f32,f64 -r 2 -w 1 -j 1 -F json >"$TMP/g.json" 2>"$TMP/err"
n=$(schema "$TMP/g.json" json 'r["benchmark"]=="gemm" and r["unit"]=="GFLOP/s" and r["peak_pct"] is not None and r["threads"]==1 and r["reps"]==2' 2>&1)
[ "$n" = 4 ] && ok "gemm json: 4 rows with the schema" || notok "gemm json: $n $(cat "$TMP/err")"
"$PY" -c "
import json,sys
rows=json.load(open('$TMP/g.json'))['results']
r=[x for x in rows if x['shape']=='M=8,N=12,K=4' and x['dtype']=='f32'][0]
assert r['work']==2*8*12*4, r['work']
assert abs(r['rate']-r['work']/r['time_median_s']/1e9) <= 1e-9*r['rate']+1e-12
" && ok "gemm work = 2MNK, rate = work / median" || notok "gemm arithmetic"

llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak 50 -F jsonl >"$TMP/g.jsonl" 2>/dev/null
n=$(schema "$TMP/g.jsonl" jsonl 2>&1); [ "$n" = 1 ] && ok "gemm jsonl" || notok "gemm jsonl: $n"
llm-bench gemm --sizes 8,16 -r 1 -w 0 -j 1 --peak 50 -F csv >"$TMP/g.csv" 2>/dev/null
"$PY" -c "
import csv
rows=list(csv.DictReader(open('$TMP/g.csv')))
assert len(rows)==2 and rows[0]['device']=='cpu' and rows[0]['dtype']=='f32' and 'peak_gflops' in rows[0] and rows[1]['commit']
" && ok "gemm csv: header and rows" || notok "gemm csv: $(head -3 "$TMP/g.csv")"
# csv numbers are written in full, as json's are: a work of 6291456 bytes (and a size of
# 1048576 in an extra column) is not "6.29146e+06" ("1.04858e+06")
llm-bench mem --size 3M --op copy -r 1 -w 0 -j 1 -F csv >"$TMP/m.csv" 2>/dev/null
llm-bench allreduce -b 1M -e 1M -r 1 -w 0 -F csv >"$TMP/a.csv" 2>/dev/null
"$PY" -c "
import csv
r=list(csv.DictReader(open('$TMP/m.csv')))[0]; a=list(csv.DictReader(open('$TMP/a.csv')))[0]
assert r['work']=='6291456' and a['size']=='1048576' and a['count']=='262144', (r['work'], a['size'], a['count'])
" && ok "csv: numbers such as work and size are written in full" ||
  notok "csv: work $(tail -1 "$TMP/m.csv" | cut -d, -f13) (want 6291456), $(head -c 300 "$TMP/a.csv")"
llm-bench gemm --sizes 8 -t f32,f64 -r 1 -w 0 -j 1 --peak 50 -F json >"$TMP/gp.json" 2>/dev/null
"$PY" -c "
import json
rows=json.load(open('$TMP/gp.json'))['results']
assert [r['dtype'] for r in rows]==['f32','f64'] and all(r['peak_gflops']==50 for r in rows), rows
assert all(abs(r['peak_pct']-100*r['rate']/50) <= 1e-9*r['peak_pct'] for r in rows)
" && ok "gemm --peak: every dtype's peak (f64 not halved)" || notok "gemm --peak f64: $(head -c 600 "$TMP/gp.json")"
llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak 50 >"$TMP/g.txt" 2>/dev/null
grep -q '^gemm  *sgemm  *cpu  *f32  *M=8,N=8,K=8' "$TMP/g.txt" && grep -q '^# commit ' "$TMP/g.txt" \
  && ok "gemm table" || notok "gemm table: $(cat "$TMP/g.txt")"
llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak 50 -F json -o "$TMP/o.json" >"$TMP/out" 2>/dev/null
[ ! -s "$TMP/out" ] && n=$(schema "$TMP/o.json" json) && [ "$n" = 1 ] && ok "-o FILE" || notok "-o FILE"
# -o is atomic: a write that fails (a full disk, LLM_FAULT_WRITE_LIMIT) leaves the old file whole
mkdir "$TMP/od" && echo old >"$TMP/od/r.json"
expect_exit "-o FILE on a full disk exits 74" 74 env LLM_FAULT_WRITE_LIMIT=100 \
  llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak 50 -F json -o "$TMP/od/r.json"
check "-o FILE on a full disk: the old file kept, no temp file" \
  sh -c '[ "$(cat "$1/r.json")" = old ] && [ "$(ls -A "$1")" = r.json ]' sh "$TMP/od"

llm-bench mem --size 64K -r 2 -w 1 -j 1 -F json >"$TMP/m.json" 2>/dev/null
n=$(schema "$TMP/m.json" json 'r["unit"]=="GB/s" and r["work"]==(2 if r["op"]=="copy" else 3)*65536' 2>&1)
[ "$n" = 2 ] && ok "mem copy and triad: bytes moved and schema" || notok "mem: $n"
# cpu rows keep exactly their fields (the cuda rows add check_err, check_bound, peak_gbs)
"$PY" - "$TMP/g.json" "$TMP/m.json" <<'P' && ok "cpu gemm and mem rows: the same fields as before" || notok "cpu row fields changed"
import json, sys
base = ["benchmark", "op", "device", "dtype", "shape", "threads", "ranks", "warmup", "reps", "time_min_s",
        "time_median_s", "time_max_s", "work", "rate", "unit", "peak_pct", "note", "commit", "host", "cpu",
        "date"]
for path, extra in ((sys.argv[1], ["peak_gflops"]), (sys.argv[2], [])):
    for r in json.load(open(path))["results"]:
        assert sorted(r) == sorted(base + extra), sorted(r)
        assert r["device"] == "cpu" and r["note"] == ""
P

for c in allreduce allgather reducescatter broadcast; do
  llm-bench $c -b 1K -e 16K -f 4 -r 2 -w 1 -F jsonl >"$TMP/c.jsonl" 2>"$TMP/err"
  f=$([ $c = broadcast ] && echo 1 || echo 0)
  n=$(schema "$TMP/c.jsonl" jsonl "r['benchmark']=='$c' and r['ranks']==1 and r['algbw']==r['rate'] and r['busbw']==r['algbw']*$f and '1 rank' in r['note'] and r['size']==r['work']" 2>&1)
  [ "$n" = 3 ] && ok "$c: sizes 1K..16K, algbw/busbw by nccl-tests at 1 rank" || notok "$c: $n"
done
grep -q "1 rank" "$TMP/err" && ok "collectives say on stderr that there is one rank" || notok "1-rank warning"

expect_exit "bad format exits 64" 64 llm-bench gemm --sizes 8 -F xml
expect_exit "bad dtype exits 64" 64 llm-bench gemm --sizes 8 --dtype int4
expect_exit "a negative --peak exits 64 (it was replaced by the measured one)" 64 llm-bench gemm --sizes 8 --peak -5
expect_exit "65 sizes exit 64 (the 65th on were dropped)" 64 llm-bench gemm --sizes "$(printf '8,%.0s' $(seq 64))8"
check "... saying at most 64" grep -q "at most 64 items" "$TMP/err"
expect_exit "33 batch sizes exit 64" 64 llm-bench train --config /dev/null -b "$(printf '1,%.0s' $(seq 32))1"
expect_exit "bad size exits 64" 64 llm-bench gemm --sizes 8x
expect_exit "zero reps exits 64" 64 llm-bench mem --size 1K -r 0
expect_exit "bad mem size exits 64" 64 llm-bench mem --size 12Q
expect_exit "bad step factor exits 64" 64 llm-bench allreduce -f 1
# cuda without a GPU (this machine): a CPU-only build and a CUDA build both refuse with 69
# and say why; usage errors first
expect_exit "cuda gemm without a GPU exits 69" 69 llm-bench gemm --sizes 8 -d cuda
grep -q "no CUDA device\|not available in this build" "$TMP/err" && ok "cuda gemm says why" || notok "cuda gemm message: $(cat "$TMP/err")"
expect_exit "cuda mem without a GPU exits 69" 69 llm-bench mem --size 1K -d cuda
grep -q "no CUDA device\|not available in this build" "$TMP/err" && ok "cuda mem says why" || notok "cuda mem message: $(cat "$TMP/err")"
expect_exit "cuda gemm f64 exits 64" 64 llm-bench gemm --sizes 8 -d cuda --dtype f64
expect_exit "cuda mem unknown op exits 64" 64 llm-bench mem --size 1K -d cuda --op stream
for c in allreduce allgather reducescatter broadcast; do
  expect_exit "cuda $c without a GPU exits 69" 69 llm-bench $c -d cuda -b 8 -e 1K
  grep -q "no CUDA device\|not available in this build\|need NCCL" "$TMP/err" && ok "cuda $c says why" \
    || notok "cuda $c message: $(cat "$TMP/err")"
done
expect_exit "cuda allreduce: unknown --format first (64)" 64 llm-bench allreduce -d cuda -F xml
expect_exit "--dist-init on the cpu exits 64" 64 llm-bench allreduce -b 1K -e 1K --dist-init file:$TMP/id
expect_exit "--dist-timeout 0 exits 64" 64 llm-bench allreduce -b 1K -e 1K --dist-timeout 0
# cpu rows under mpirun (MPI builds): as before the cuda path, no "wrong" field
if command -v mpirun >/dev/null; then
  MPIRUN=(mpirun --oversubscribe --mca btl self,vader); [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
  if no_leak_checks timeout 120 "${MPIRUN[@]}" -np 2 \
      llm-bench allreduce -b 1K -e 4K -r 2 -w 1 -F jsonl >"$TMP/mp.jsonl" 2>"$TMP/err"; then
    n=$(schema "$TMP/mp.jsonl" jsonl "r['device']=='cpu' and r['ranks']==2 and r['op']=='in-place' and r['note']=='2 ranks, mpi' and 'wrong' not in r and r['busbw']==r['algbw']" 2>&1)
    [ "$n" = 2 ] && ok "allreduce under mpirun -np 2: cpu rows as before" || notok "mpirun cpu rows: $n"
  elif grep -q "this build has no MPI" "$TMP/err"; then skip "allreduce under mpirun" "MPI=0 build"
  else notok "allreduce under mpirun -np 2: $(tail -c 300 "$TMP/err")"; fi
fi
expect_exit "cuda train without a GPU exits 69" 69 llm-bench train --config /dev/null -d cuda
expect_exit "unknown subcommand exits 64" 64 llm-bench gemmm
expect_exit "unwritable -o exits 74" 74 llm-bench gemm --sizes 8 -r 1 -w 0 -o /nonexistent/dir/x.json
llm-bench gemm --sizes 8,8,8,8 -r 1 -w 0 --peak 50 -F jsonl 2>"$TMP/err" | head -c 10 >/dev/null
[ ! -s "$TMP/err" ] && ok "closed stdout ends quietly" || notok "closed stdout: $(cat "$TMP/err")"

# train and infer on a tiny model (random init from a config; a trained file for infer)
cat >"$TMP/tiny.yaml" <<Y
model: {arch: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
train: {batch_size: 2, seq_len: 16}
Y
llm-bench train --config "$TMP/tiny.yaml" -b 1,2 -r 2 -w 1 -j 1 --peak 50 -F json >"$TMP/t.json" 2>"$TMP/err"
n=$(schema "$TMP/t.json" json 'r["unit"]=="tokens/s" and r["work"]==r["batch"]*16 and r["mfu"]>0 and r["ms_per_step"]>0 and r["flops_per_token"]>0' 2>&1)
[ "$n" = 2 ] && ok "train --config: tokens/s, ms/step, MFU per batch" || notok "train: $n $(cat "$TMP/err")"
# mixed precision: the same row schema plus "precision"; dtype is the matmul operands'
llm-bench train --config "$TMP/tiny.yaml" -b 1,2 -r 2 -w 1 -j 1 --peak 50 --precision bf16 -F json >"$TMP/tb.json" 2>"$TMP/err"
n=$(schema "$TMP/tb.json" json 'r["precision"]=="bf16" and r["dtype"]=="bf16" and r["unit"]=="tokens/s" and r["work"]==r["batch"]*16 and r["mfu"]>0 and r["ms_per_step"]>0 and abs(r["mfu"]-100*r["rate"]*r["flops_per_token"]/50e9)<=1e-9*r["mfu"] and r["peak_pct"]==r["mfu"]' 2>&1)
[ "$n" = 2 ] && ok "train --precision bf16: row schema with precision, MFU as in fp32" || notok "train bf16: $n $(cat "$TMP/err")"
"$PY" -c "
import json; r = json.load(open('$TMP/t.json'))['results'][0]
assert r['precision'] == 'fp32' and r['dtype'] == 'f32', r
" && ok "train rows say fp32 by default" || notok "train fp32 precision field"
# -t is --seq too (llm-profile's spelling)
llm-bench train --config "$TMP/tiny.yaml" -b 1 -t 8 -r 1 -w 0 -j 1 --peak 50 -F jsonl >"$TMP/t8.jsonl" 2>"$TMP/err"
n=$(schema "$TMP/t8.jsonl" jsonl 'r["work"]==8 and "T=8," in r["shape"]' 2>&1)
[ "$n" = 1 ] && ok "train -t 8 is --seq 8" || notok "train -t: $n $(cat "$TMP/err")"
llm-bench train --config "$TMP/tiny.yaml" -b 2 -r 1 -w 1 -j 1 --peak 50 --precision fp16 -F jsonl >"$TMP/th.jsonl" 2>"$TMP/err"
n=$(schema "$TMP/th.jsonl" jsonl 'r["precision"]=="fp16" and r["dtype"]=="f16" and r["mfu"]>0' 2>&1)
[ "$n" = 1 ] && ok "train --precision fp16 (jsonl)" || notok "train fp16: $n $(cat "$TMP/err")"
llm-bench train --config "$TMP/tiny.yaml" -b 2 -r 1 -w 0 -j 1 -d cpu-ref --peak 50 --precision bf16 -F csv >"$TMP/tb.csv" 2>"$TMP/err"
"$PY" -c "
import csv; rows = list(csv.DictReader(open('$TMP/tb.csv')))
assert len(rows) == 1 and rows[0]['precision'] == 'bf16' and rows[0]['device'] == 'cpu-ref', rows
" && ok "train csv: a precision column (cpu-ref)" || notok "train csv: $(head -2 "$TMP/tb.csv") $(cat "$TMP/err")"
llm-bench train --config "$TMP/tiny.yaml" -b 2 -r 1 -w 0 -j 1 --peak 50 --precision bf16 >"$TMP/tb.txt" 2>/dev/null
grep -qE '^train +step +cpu +bf16 .* precision=bf16$' "$TMP/tb.txt" && ok "train table: dtype and precision" || notok "train table: $(cat "$TMP/tb.txt")"
printf 'model: {arch: gpt2, n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 16}\ntrain: {batch_size: 1, seq_len: 8, precision: fp16}\n' >"$TMP/tinyh.yaml"
llm-bench train --config "$TMP/tinyh.yaml" -r 1 -w 0 -j 1 --peak 50 -F jsonl >"$TMP/tc.jsonl" 2>"$TMP/err"
n=$(schema "$TMP/tc.jsonl" jsonl 'r["precision"]=="fp16"' 2>&1)
[ "$n" = 1 ] && ok "train: train.precision of --config is the default" || notok "train config precision: $n $(cat "$TMP/err")"
expect_exit "train bad precision exits 64" 64 llm-bench train --config "$TMP/tiny.yaml" --precision fp8
grep -q "precision 'fp8'" "$TMP/err" && ok "train bad precision is named" || notok "train bad precision message: $(cat "$TMP/err")"
expect_exit "infer has no --precision (64)" 64 llm-bench infer "$TMP/nope.llmk" --precision bf16
# 0 in --seq and --peak meant "not given": a typed 0 took the config's length, the
# measured peak (as --peak -5 is refused, "must be positive")
for a in "--seq 0" "-t 0" "-s -1"; do
  expect_exit "train $a exits 64 (0 was train.seq_len)" 64 llm-bench train --config "$TMP/tiny.yaml" -b 1 -r 1 -w 0 -j 1 --peak 50 $a
  check "... it says --seq must be >= 1" grep -q -- "--seq must be >= 1" "$TMP/err"
  expect_exit "infer $a exits 64 before the model is read" 64 llm-bench infer "$TMP/nope.llmk" $a
done
expect_exit "train --peak 0 exits 64 (it was the measured peak)" 64 llm-bench train --config "$TMP/tiny.yaml" -b 1 -r 1 -w 0 -j 1 --peak 0
check "... it says --peak must be positive" grep -q -- "--peak must be positive" "$TMP/err"
expect_exit "gemm --peak 0 exits 64 (it was the measured peak)" 64 llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak 0
expect_exit "gemm --peak=0.0 exits 64" 64 llm-bench gemm --sizes 8 -r 1 -w 0 -j 1 --peak=0.0
if command -v gnuplot >/dev/null; then
  "$ROOT/scripts/plot-throughput.sh" "$TMP/t.json" "$TMP/tp.png" >/dev/null 2>"$TMP/err" &&
    [ "$(head -c 4 "$TMP/tp.png" | od -An -c | tr -d ' ')" = '211PNG' ] && ok "plot-throughput.sh writes a PNG" ||
    notok "plot-throughput.sh: $(cat "$TMP/err")"
  printf '{"step":1,"loss":5.5}\n{"step":2,"loss":4.9}\n{"step":2,"val_loss":5.0}\n{"step":3,"loss":4.1}\n' >"$TMP/m.jsonl"
  "$ROOT/scripts/plot-loss.sh" "$TMP/m.jsonl" "$TMP/loss.png" >/dev/null 2>"$TMP/err" &&
    [ "$(head -c 4 "$TMP/loss.png" | od -An -c | tr -d ' ')" = '211PNG' ] && ok "plot-loss.sh writes a PNG" ||
    notok "plot-loss.sh: $(cat "$TMP/err")"
  "$ROOT/scripts/plot-loss.sh" "$TMP/g.json" "$TMP/x.png" >/dev/null 2>&1 && notok "plot-loss.sh refuses non-metrics" || ok "plot-loss.sh refuses non-metrics"
  for s in plot-loss plot-throughput plot-roofline; do
    expect_exit "$s.sh: a missing input exits 66" 66 "$ROOT/scripts/$s.sh" "$TMP/nope.json" "$TMP/x.png"
  done
else
  skip "plot scripts" "gnuplot not installed"
fi
expect_exit "train without a model exits 64" 64 llm-bench train
expect_exit "train with a missing model exits 66" 66 llm-bench train "$TMP/nope.llmk"

if [ -f "$DATA/tinyshakespeare/input.txt" ]; then
  if tiny_tokmodel; then
    llm-bench infer "$M" -b 1,2 -s 8 --gen 4 -r 2 -w 1 -j 1 -F jsonl >"$TMP/i.jsonl" 2>"$TMP/err"
    n=$(schema "$TMP/i.jsonl" jsonl '(r["op"]=="prefill" and r["ttft_ms"]>0 and r["work"]==r["batch"]*8) or (r["op"]=="decode" and r["tpot_ms"]>0 and r["work"]==r["batch"] and r["reps"]==8)' 2>&1)
    [ "$n" = 4 ] && ok "infer: prefill and decode rows per batch, TTFT and TPOT" || notok "infer: $n $(cat "$TMP/err")"
    expect_exit "infer past max_seq_len exits 64" 64 llm-bench infer "$M" -s 30 --gen 8
    # T + gen overflows an int: still past max_seq_len (was exit 71, a KV cache 'out of memory')
    expect_exit "infer -s 2147483647 exits 64" 64 llm-bench infer "$M" -s 2147483647 -r 1 -w 0 -j 1
    grep -q 'exceed max_seq_len' "$TMP/err" && ok "infer -s 2147483647: says max_seq_len" || notok "infer huge -s: $(cat "$TMP/err")"
    expect_exit "infer --gen 2147483647 exits 64" 64 llm-bench infer "$M" -s 8 --gen 2147483647 -r 1 -w 0 -j 1
  else
    notok "tiny training for infer failed: $(tail -c 300 "$TMP/err")"
  fi
else
  skip "infer" "no shared data"
fi
# tests/gpu/bench_check.sh: skips without a GPU; its steps and validators on the CPU
bash "$ROOT/tests/gpu/bench_check.sh" "$BIN" "$TMP/bc" >"$TMP/bc.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^bench_check: no GPU: skipped" "$TMP/bc.out" && ok "bench_check.sh skips without a GPU" \
  || notok "bench_check.sh without a GPU: exit $rc $(tail -3 "$TMP/bc.out")"
if "$PY" -c 1 2>/dev/null; then
  BENCH_CHECK_DEVICE=cpu bash "$ROOT/tests/gpu/bench_check.sh" "$BIN" "$TMP/bcc" >"$TMP/bc.out" 2>&1; rc=$?
  np=$(grep -c '^[a-z0-9 ]* PASS ' "$TMP/bc.out")
  [ $rc = 0 ] && grep -q "^bench_check: [0-9]* checks, 0 failed" "$TMP/bc.out" && [ "$np" -ge 8 ] \
    && ok "bench_check.sh on the cpu: $np validations pass" || notok "bench_check.sh on the cpu: exit $rc, $np PASS: $(tail -5 "$TMP/bc.out")"
fi
echo "1..$_n"
