#!/bin/bash
# tests/gpu/launch_limits.py on made-up ptxas reports and launch logs: each hardware limit
# it holds the emulator's launches to fails when broken and passes at its edge (the real
# join, against `make cuda-res`, runs in tests/cli/gpu_emu.sh and gpu_emu_full.sh).
. "$(dirname "$0")/lib.sh"
L=$ROOT/tests/gpu/launch_limits.py
cd "$TMP" || exit 1
mkdir -p res/kernels
# k_regs: 72 registers (void k_regs<1>(float*)); k_bound: __launch_bounds__(128);
# k_smem: 40 KiB static shared memory; k_ok: 32 registers, nothing else
{
  for a in sm_80 sm_90; do
    cat <<T
ptxas info    : Compiling entry function '_Z6k_regsILi1EEvPf' for '$a'
ptxas info    : Function properties for _Z6k_regsILi1EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z7k_boundPf' for '$a'
ptxas info    : Function properties for _Z7k_boundPf
    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z6k_smemPf' for '$a'
ptxas info    : Function properties for _Z6k_smemPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 40960 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4k_okPf' for '$a'
ptxas info    : Function properties for _Z4k_okPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 360 bytes cmem[0]
T
  done
  echo "maxntid _Z7k_boundPf 128"
} >res/kernels/k.txt
run() { python3 "$L" res "$@" >out.txt 2>&1; }
# within every limit: 72 registers x 896 threads = 64512 <= 65536; 128 threads at the
# bound; 40 KiB static + 8 KiB dynamic = 48 KiB
printf 'launch k_regs<LO> 896 0\nlaunch k_bound 128 0\nlaunch k_smem 256 8192\nlaunch k_ok 1024 0\n' >good.log
run good.log
check "at every limit's edge: exit 0" test $? = 0
check "... a row per kernel, the summary line" bash -c "grep -q '^k_regs  *896 ' out.txt && grep -q '^launch limits: 4 kernels, 0 failed' out.txt"
printf 'launch k_regs<LO,_HS> 1024 0\n' >regs.log
run regs.log
check "72 registers x 1024 threads: exit 1" test $? = 1
check "... named, per architecture" bash -c "grep -q '^FAIL k_regs (sm_80): 72 registers x 1024 threads need 73728' out.txt && grep -q '^FAIL k_regs (sm_90)' out.txt"
printf 'launch k_bound 256 0\n' >bound.log
run bound.log
check "256 threads over __launch_bounds__(128): exit 1" bash -c "test $? = 1 && grep -q '^FAIL k_bound: 256 threads per block, __launch_bounds__ 128' out.txt"
printf 'launch k_smem 256 8193\n' >smem.log
run smem.log
check "40 KiB static + 8193 B dynamic without an opt-in: exit 1" bash -c "test $? = 1 && grep -q '^FAIL k_smem: 40960 B static + 8193 B dynamic' out.txt"
printf 'launch k_smem 256 8193\noptin k_smem 8193\n' >optin.log
run optin.log
check "... with the opt-in: exit 0" test $? = 0
printf 'launch k_smem 256 100000\noptin k_smem 192512\n' >big.log
run big.log
check "an opt-in to 188 KiB with 40 KiB static (over 227 KiB): exit 1" bash -c "test $? = 1 && grep -q '^FAIL k_smem: opt-in to 192512 B' out.txt"
printf 'launch k_missing 32 0\n' >missing.log
run missing.log
check "a launched kernel ptxas did not report: exit 1" bash -c "test $? = 1 && grep -q '^FAIL k_missing: launched by the emulator, not in ptxas output' out.txt"
: >empty.log
run empty.log
check "no launches at all: exit 1 (nothing joined)" test $? = 1
printf 'launch k_ok 64 0\n' >one.log
run one.log
check "kernels never launched are listed" grep -q '^compiled, never launched by these runs (3): k_bound k_regs k_smem$' out.txt
check "... and pass without --all-launched" bash -c "python3 '$L' res one.log >/dev/null"
python3 "$L" --all-launched kernels res one.log >out.txt 2>&1
check "--all-launched kernels: those never launched from there fail" \
  bash -c "test $? = 1 && grep -q '^FAIL k_regs (kernels/k.cu): compiled, never launched' out.txt && test \$(grep -c '^FAIL' out.txt) = 3"
python3 "$L" --all-launched elsewhere res one.log >out.txt 2>&1
check "--all-launched of another folder: exit 0" test $? = 0
echo "1..$_n"
