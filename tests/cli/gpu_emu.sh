#!/bin/bash
# The CUDA backend on the emulated device (make CUDA=emu, tests/emu: every .cu compiled by
# the host compiler, kernels run on the CPU, cuBLAS computed on the CPU):
# scripts/gpu-check.sh --emu runs its GPU steps there, and every row must pass: each op
# against the double reference and cpu-ref (also with one warp running ahead of the
# others, which a missing barrier does not survive), training cuda=cpu in fp32, bf16,
# fp16 and bf16 without the fused attention, decode and eval cuda=cpu.
. "$(dirname "$0")/lib.sh"
if [ "${LLM_SAN:-0}" = 1 ]; then
  skip "emulated CUDA backend" "sanitizer run (tests/unit/test_emu_* run the kernels under ASan)"; exit 0
fi
if [ ! -x "$ROOT/build/emu/gpu/gpu_check" ]; then
  skip "emulated CUDA backend" "not built (make CUDA=emu all; make test builds it unless EMU=0)"; exit 0
fi
if ! have_data tinyshakespeare/input.txt; then skip "emulated CUDA backend" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$ROOT" || exit 1
GPU_CHECK_SEED=1 LLM_DATA=$DATA bash scripts/gpu-check.sh --emu >"$TMP/out" 2>&1
rc=$?
R=build/gpu-check-emu/report.txt
check "gpu-check.sh --emu exits 0 (rc=$rc)" test $rc = 0
check "report written" test -s $R
for r in "ops vs reference" "ops, warps skewed (emu)" "train 4 steps cuda=cpu (fp32)" \
         "train 4 steps cuda=cpu (bf16)" "train 4 steps cuda=cpu (fp16)" \
         "train cuda=cpu (bf16, no flash)" "train metrics gpu_\* fields" \
         "infer greedy decode cuda=cpu" "infer batch-4 sampled cuda=cpu" \
         "infer full-forward nll cuda=cpu"; do
  line=$(grep -m1 "^$r " $R)
  if echo "$line" | grep -q ' PASS '; then ok "$r: ${line#*PASS }"
  else notok "$r: ${line:-missing} $(grep -m3 'FAIL\|emu:' "$TMP/out" | tr '\n' ' ')"; fi
done
check "no FAIL row" bash -c "! grep -q ' FAIL ' $R"
echo "1..$_n"
