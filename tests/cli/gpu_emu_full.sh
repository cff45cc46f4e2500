#!/bin/bash
# test-timeout: 2400
# The full gpu_check (not --tiny) on the emulated device (make CUDA=emu): every CUDA op
# at GPT-2 124M's shapes too (T=1024, V=50304, C=768, the fused attention over many tiles,
# the lo GEMMs' epilogues at real widths) against the double reference and cpu-ref, with
# a fixed seed.  ~10 minutes on 2 cores, so it runs where LLM_EMU_FULL=1 (.ci/run sets it)
# and is skipped otherwise; tests/cli/gpu_emu.sh runs the --tiny table on every make test.
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1
G=$ROOT/build/emu/gpu/gpu_check
if [ "${LLM_EMU_FULL:-0}" != 1 ]; then skip "full gpu_check on the emulated device" "LLM_EMU_FULL=1 runs it (CI does)"; exit 0; fi
if [ "${LLM_SAN:-0}" = 1 ]; then skip "full gpu_check on the emulated device" "not under sanitizers (hours)"; exit 0; fi
if [ ! -x "$G" ]; then skip "full gpu_check on the emulated device" "not built (make CUDA=emu all)"; exit 0; fi
LLM_EMU_LAUNCH_LOG=$TMP/launches.txt "$G" --device cuda --seed 11 --out "$TMP/ops.txt" >"$TMP/ops.log" 2>&1
rc=$?
sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$TMP/ops.log")
if [ $rc = 0 ] && [ -n "$sum" ]; then ok "full gpu_check, emulated, seed 11: ${sum#gpu_check: }"
else notok "full gpu_check, emulated, seed 11: rc=$rc ${sum#gpu_check: } $(grep -m5 'FAIL\|emu:\|cuda error' "$TMP/ops.log" | tr '\n' ' ')"; fi
# the GPT-2-shaped rows were among them (a --tiny table has none)
check "GPT-2 shapes checked (T1024 attention, V50304 rows)" \
  bash -c "grep -q 'T1024' '$TMP/ops.txt' && grep -q '50304' '$TMP/ops.txt'"
# the launches at those shapes within what ptxas gave each kernel (registers, static
# shared memory, __launch_bounds__): the limits the emulator itself cannot know
launch_limits "launch limits at GPT-2 shapes (ptxas)" "$TMP/launches.txt"
