#!/bin/bash
# The CUDA backend on the emulated device (make CUDA=emu, tests/emu: every .cu compiled by
# the host compiler, kernels run on the CPU, cuBLAS computed on the CPU):
# scripts/gpu-check.sh --emu runs its GPU steps there, and every row must pass: each op
# against the double reference and cpu-ref (also with one warp running ahead of the
# others, which a missing barrier does not survive), training cuda=cpu in fp32, bf16,
# fp16 and bf16 without the fused attention, decode and eval cuda=cpu (and the full
# table on the cpu device, the CPU backends' contracts at GPT-2 shapes).  All of it with
# the copies of every stream lagging (LLM_EMU_STREAMS=late, tests/emu/cuda_rt.cpp), as a
# GPU may run them, so a missing stream wait shows; then the upload rows with the copy
# stream running ahead of the compute stream (LLM_EMU_STREAMS=ahead).
# Under make check (LLM_SAN): the sanitized emulated build instead (build/san/emu), where
# ASan sees every kernel's device-memory access: gpu_check --tiny and two bf16 training
# steps on cuda must pass without a report.
. "$(dirname "$0")/lib.sh"
if ! have_data tinyshakespeare/input.txt; then skip "emulated CUDA backend" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$ROOT" || exit 1
if [ "${LLM_SAN:-0}" = 1 ]; then
  E=$ROOT/build/san/emu
  if [ ! -x "$E/gpu/gpu_check" ]; then skip "emulated CUDA backend (ASan)" "not built (make check builds it unless EMU=0)"; exit 0; fi
  for o in 0 3; do
    LLM_EMU_ORDER=$o "$E/gpu/gpu_check" --tiny --device cuda --seed 1 --out "$TMP/ops.txt" >"$TMP/ops.log" 2>&1
    rc=$?
    sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$TMP/ops.log")
    if [ $rc = 0 ] && ! grep -q 'ERROR: AddressSanitizer\|runtime error' "$TMP/ops.log"; then ok "ops under ASan, order $o: ${sum#gpu_check: }"
    else notok "ops under ASan, order $o: rc=$rc $(grep -m3 'FAIL\|ERROR\|runtime error' "$TMP/ops.log" | tr '\n' ' ')"; fi
  done
  cd "$TMP" || exit 1
  tiny_data 100000
  cat >t.yaml <<Y
model: {n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, val: $TMP/val.bin, tokenizer: byte}
train: {batch_size: 2, seq_len: 64, max_steps: 2, lr: 0.001, warmup_steps: 1, save_every: 100000, seed: 7, threads: 2, device: cuda, eval_every: 0, eval_batches: 1}
Y
  "$E/bin/llm-train" --config t.yaml --precision bf16 -o run >out 2>err
  rc=$?
  if [ $rc = 0 ] && ! grep -q 'ERROR: AddressSanitizer\|runtime error' err; then ok "2 bf16 training steps on cuda under ASan"
  else notok "bf16 training on cuda under ASan: rc=$rc $(grep -m3 'ERROR\|runtime error\|llm-train' err | tr '\n' ' ')"; fi
  echo "1..$_n"
  exit 0
fi
if [ ! -x "$ROOT/build/emu/gpu/gpu_check" ]; then
  skip "emulated CUDA backend" "not built (make CUDA=emu all; make test builds it unless EMU=0)"; exit 0
fi
GPU_CHECK_SEED=1 LLM_DATA=$DATA LLM_EMU_STREAMS=late LLM_EMU_LAUNCH_LOG=$TMP/launches.txt \
  bash scripts/gpu-check.sh --emu >"$TMP/out" 2>&1
rc=$?
R=build/gpu-check-emu/report.txt
check "gpu-check.sh --emu exits 0 (rc=$rc)" test $rc = 0
check "report written" test -s $R
for r in "ops vs reference" "ops, warps skewed (emu)" "train 4 steps cuda=cpu (fp32)" \
         "train 4 steps cuda=cpu (bf16)" "train 4 steps cuda=cpu (fp16)" \
         "train cuda=cpu (bf16, no flash)" "train cuda=cpu (bf16, LLM_CUDA_OFF=all)" \
         "train metrics gpu_\* fields" \
         "infer greedy decode cuda=cpu" "infer batch-4 sampled cuda=cpu" \
         "infer full-forward nll cuda=cpu"; do
  line=$(grep -m1 "^$r " $R)
  if echo "$line" | grep -q ' PASS '; then ok "$r: ${line#*PASS }"
  else notok "$r: ${line:-missing} $(grep -m3 'FAIL\|emu:' "$TMP/out" | tr '\n' ' ')"; fi
done
check "no FAIL row" bash -c "! grep -q ' FAIL ' $R"
# the full table on the cpu device: the same contracts of the CPU backends at GPT-2's
# shapes (it found the cpu's matmul_rows giving a row other bits at 32 rows than alone)
build/emu/gpu/gpu_check --device cpu --seed 1 >"$TMP/cpu.log" 2>&1
rc=$?
sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$TMP/cpu.log")
if [ $rc = 0 ] && [ -n "$sum" ]; then ok "full gpu_check on the cpu device: ${sum#gpu_check: }"
else notok "full gpu_check on the cpu device: rc=$rc ${sum#gpu_check: } $(grep -m5 'FAIL' "$TMP/cpu.log" | tr '\n' ' ')"; fi
# llm-bench's own kernels on the emulated device (fills, the GEMM's sampled check, the
# STREAM copies): every result checked, at odd shapes too
LLM_EMU_LAUNCH_LOG=$TMP/launches.txt build/emu/bin/llm-bench gemm -d cuda -s 64,33x17x45 \
  -t f32,tf32,bf16,f16 -r 1 -w 0 -F jsonl >"$TMP/bgemm.jsonl" 2>"$TMP/bgemm.err"
LLM_EMU_LAUNCH_LOG=$TMP/launches.txt build/emu/bin/llm-bench mem -d cuda -s 64K -r 1 -w 0 \
  -F jsonl >"$TMP/bmem.jsonl" 2>"$TMP/bmem.err"
python3 - "$TMP/bgemm.jsonl" "$TMP/bmem.jsonl" <<'PY' && ok "llm-bench gemm (4 dtypes, 2 shapes) and mem (5 ops) on cuda, results checked (emu)" || notok "llm-bench gemm/mem on cuda (emu): $(head -c 300 "$TMP/bgemm.err" "$TMP/bmem.err")"
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
m = [json.loads(l) for l in open(sys.argv[2])]
assert len(g) == 8 and len(m) == 5, (len(g), len(m))
for r in g:
    assert r["device"] == "cuda" and "output checked" in r["note"], r
    assert 0 <= r["check_err"] <= r["check_bound"], r
assert sorted(r["op"] for r in m) == ["copy", "d2h", "h2d", "memcpy", "triad"], m
assert all("output checked" in r["note"] and r["rate"] > 0 for r in m), m
PY
# every kernel those runs launched, at the block size and shared memory it was launched
# with, within what ptxas gave it (registers, static shared memory, __launch_bounds__);
# and every kernel of kernels/cuda among them (one no emulated run reaches is unchecked)
launch_limits "launch limits of the --emu run's kernels (ptxas), all of kernels/cuda ran" \
  --all-launched kernels/cuda "$TMP/launches.txt"
# the bisection of a failed comparison: with a part broken on purpose
# (LLM_CUDA_FAULT=xent_fused: its losses come out zero) every training comparison fails,
# and its bisection names that part alone of those tried
GPU_CHECK_STEPS=train GPU_CHECK_OFF_NAMES="staging xent_fused" LLM_CUDA_FAULT=xent_fused \
  LLM_DATA=$DATA bash scripts/gpu-check.sh --emu >"$TMP/bisect.out" 2>&1
rc=$?
check "gpu-check.sh --emu with a broken part exits 1 (rc=$rc)" test $rc = 1
for p in fp32 bf16 fp16; do
  check "the $p comparison fails and its bisection names xent_fused" \
    grep -q "^train cuda=cpu ($p): bisect *INFO *passes with LLM_CUDA_OFF= each of: xent_fused\$" $R
done
check "... and every part off passes" grep -q "^train cuda=cpu (bf16, LLM_CUDA_OFF=all) *PASS" $R
LLM_EMU_STREAMS=ahead build/emu/gpu/gpu_check --tiny --only xfer --seed 1 >"$TMP/xfer.log" 2>&1
rc=$?
sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$TMP/xfer.log")
if [ $rc = 0 ] && grep -q '^to_device copy stream .* PASS' "$TMP/xfer.log"; then ok "uploads, copy stream ahead (emu): ${sum#gpu_check: }"
else notok "uploads, copy stream ahead (emu): rc=$rc $(grep -m3 'FAIL\|emu:' "$TMP/xfer.log" | tr '\n' ' ')"; fi
# a device whose shared-memory opt-in is 99 KiB (sm_86/sm_89): the fused attention's
# kernels that need more give way to the GEMM form instead of failing
LLM_EMU_SMEM_OPTIN=99 build/emu/gpu/gpu_check --tiny --only attention --seed 1 >"$TMP/optin.log" 2>&1
rc=$?
sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$TMP/optin.log")
if [ $rc = 0 ]; then ok "attention on a 99 KiB opt-in device (emu): ${sum#gpu_check: }"
else notok "attention on a 99 KiB opt-in device (emu): rc=$rc $(grep -m3 'FAIL\|emu:\|cuda' "$TMP/optin.log" | tr '\n' ' ')"; fi
# the default device (auto) where the emulated build sees its device: llm-train and
# llm-infer run on cuda; a quantized model, which cuda cannot run, falls back to the cpu
# with a note (its text equal to the cpu's), and --device cuda refuses it with 69
E=$ROOT/build/emu/bin
PY=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
cd "$TMP" || exit 1
tiny_data 60000
tiny_model 2
"$E/llm-train" --config m.yaml -o run2 -v -m m32.jsonl >/dev/null 2>err2
check "llm-train's default device is cuda where one is seen (emu)" grep -q 'device cuda' err2
# MFU against the device's table peak for the precision's GEMMs: the emulated device is
# cc 9.0 with 4 SMs at 1000 MHz (tests/emu/cuda_rt.cpp), so 4 x 1e9 x 256 FLOP/s for fp32
# and x 4096 for the bf16 tensor cores (common/bench_cuda.c's table)
"$E/llm-train" --config m.yaml -o run3 --precision bf16 --set train.max_steps=2 -m mbf.jsonl >/dev/null 2>err3
$PY - m32.jsonl 256 mbf.jsonl 4096 <<'PY' && ok "llm-train's mfu on cuda: the table peak of the precision (emu)" || notok "llm-train's mfu on cuda (emu): $(head -c 300 err3)"
import json, sys
L, C, V, maxT, T = 2, 64, 257, 64, 64
Vp = (V + 127) // 128 * 128
fpt = 6 * (Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C) + 6 * L * C * T
n = 0
for path, rate in zip(sys.argv[1::2], sys.argv[2::2]):
    for l in open(path):
        j = json.loads(l)
        if "mfu" not in j: continue
        want = j["tokens_per_s"] * fpt / (4 * 1e9 * int(rate))
        assert abs(j["mfu"] - want) <= 6e-7 + 1e-3 * want, (path, j["mfu"], want)
        n += 1
assert n >= 3, n
PY
# a device the peak table does not know (cc 8.9 has no bf16 entry: GeForce and data-centre
# boards differ): no mfu in the metrics or the Prometheus file rather than one against a
# guessed peak, a note saying how to set it; llm-bench train leaves mfu out, peak_pct null;
# train.peak_flops / --peak bring it back
LLM_EMU_CC=8.9 "$E/llm-train" --config m.yaml -o run4 --precision bf16 --set train.max_steps=2 \
  -m mu.jsonl --prom mu.prom >/dev/null 2>err4
check "unknown GPU peak: llm-train runs (emu)" test -s mu.jsonl
check "... its step lines have no mfu" $PY -c 'import json,sys; L=[json.loads(l) for l in open("mu.jsonl")]; sys.exit(not (len([j for j in L if "step" in j and "loss" in j]) >= 2 and all("mfu" not in j for j in L)))'
check "... nor the Prometheus file" sh -c '! grep -q llmkit_train_mfu mu.prom && grep -q llmkit_train_loss mu.prom'
check "... and the log says how to have it" grep -q 'no peak known for this GPU at bf16; set train.peak_flops' err4
LLM_EMU_CC=8.9 "$E/llm-train" --config m.yaml -o run5 --precision bf16 --set train.max_steps=2 \
  --set train.peak_flops=1e12 -m mp.jsonl >/dev/null 2>&1
check "... train.peak_flops gives it back" $PY -c 'import json,sys; L=[json.loads(l) for l in open("mp.jsonl")]; sys.exit(not [j for j in L if j.get("mfu", 0) > 0])'
LLM_EMU_CC=8.9 "$E/llm-bench" train -c m.yaml -d cuda -p bf16 -b 1 -t 16 -r 1 -w 0 --format jsonl >bu.jsonl 2>bu.err
LLM_EMU_CC=8.9 "$E/llm-bench" train -c m.yaml -d cuda -p bf16 -b 1 -t 16 -r 1 -w 0 --peak 1000 --format jsonl >bp.jsonl 2>>bu.err
check "... llm-bench train: no mfu, peak_pct null, a note; --peak gives both (emu)" $PY -c '
import json, sys
u = json.loads(open("bu.jsonl").readline()); p = json.loads(open("bp.jsonl").readline())
sys.exit(not ("mfu" not in u and u["peak_pct"] is None and "no peak known" in u["note"]
              and p["mfu"] > 0 and p["peak_pct"] == p["mfu"]))'
"$E/llm-infer" "$M" -p "ROMEO:" -n 12 --temperature 0 -v >a.txt 2>a.err
llm-infer "$M" -p "ROMEO:" -n 12 --temperature 0 --device cpu >b.txt 2>/dev/null
check "llm-infer's default device is cuda where one is seen (emu)" grep -q 'device cuda' a.err
check "... and its text equals the cpu's" cmp -s a.txt b.txt
llm-quantize "$M" q8.llmk --type q8_0 >/dev/null 2>&1
"$E/llm-infer" q8.llmk -p "ROMEO:" -n 12 --temperature 0 >c.txt 2>c.err
rc=$?
llm-infer q8.llmk -p "ROMEO:" -n 12 --temperature 0 --device cpu >d.txt 2>/dev/null
check "auto: a q8_0 model falls back to the cpu (rc=$rc)" test $rc = 0
check "... saying so on stderr" grep -q "q8_0 not supported for inference on device 'cuda'; running on cpu" c.err
check "... its text equal to the cpu's" bash -c "test -s c.txt && cmp -s c.txt d.txt"
expect_exit "--device cuda refuses a q8_0 model" 69 "$E/llm-infer" q8.llmk -p "ROMEO:" -n 4 --device cuda
# a GPU present but not usable: auto runs on the cpu and says why; --device cuda refuses
LLM_CUDA_DEVICE=5 "$E/llm-infer" "$M" -p "ROMEO:" -n 12 --temperature 0 >e.txt 2>e.err
rc=$?
check "auto: an unusable GPU (LLM_CUDA_DEVICE=5) leaves llm-infer on the cpu (rc=$rc)" \
  bash -c "test $rc = 0 && cmp -s e.txt b.txt"
check "... warning why" grep -q "device auto: the GPU is not usable (no CUDA device: LLM_CUDA_DEVICE '5' is not a device in 0..0); running on cpu" e.err
expect_exit "--device cuda with LLM_CUDA_DEVICE=5 is refused" 69 env LLM_CUDA_DEVICE=5 "$E/llm-infer" "$M" -p "ROMEO:" -n 4 --device cuda
expect_exit "--device cuda with LLM_CUDA_DEVICE=+0 (a sign) is refused" 69 env LLM_CUDA_DEVICE=+0 "$E/llm-infer" "$M" -p "ROMEO:" -n 4 --device cuda
echo "1..$_n"
