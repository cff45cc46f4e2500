#!/bin/bash
# gpu-check.sh — one command that proves the CUDA backend on a lent GPU and times it.
#
# Two halves, because the GPU machine may lack libyaml/OpenBLAS/PCRE2/jansson and has no
# package registry:
#   here (no GPU):  scripts/gpu-check.sh --prepare
#       builds with CUDA=1 in a copy of the tree of its own (build/gpu-src: never a mix
#       with another mode's objects) and fills build/gpu-carry/ (binaries, the non-system shared
#       libraries they need, as one xz archive unpacked on the GPU machine; small token
#       files); prints the `run` call to use.
#   on the GPU:     scripts/gpu-check.sh [--sanitize] [--quick]
#       (with `carry: ["build/gpu-carry"]`) uses the carried binaries (or builds when
#       there are none and the tools are there), then:
#         1. gpu_check: every CUDA op against the fp64 reference and cpu-ref, the
#            mixed-precision ops (cast_lo bit-exact, lo GEMMs) and device_stats
#         2. 20 training steps of a small model on cuda and cpu, same init: losses <= 1e-4
#            (fp32), <= 2e-2 (--precision bf16 and fp16, when llm-train has it; bf16 also
#            with LLM_CUDA_FLASH=0); the cuda run's metrics carry the gpu_* fields, the cpu
#            run's none
#         3. llm-infer: greedy KV-cache decode and --eval on cuda equal to cpu
#         4. host CPU: model and SIMD flags; the quantized-kernel unit test (AVX2, AVX-512,
#            VNNI paths against the scalar reference, skipping what the CPU lacks)
#         5. --sanitize: compute-sanitizer memcheck + racecheck over the tiny checks and a
#            tiny training step
#         6. timings: cuBLASLt GEMM 4096^3 (fp32, tf32, bf16), per-op times at GPT-2 124M
#            shapes (the fused attention by its mma.sync and WMMA kernels and the GEMM
#            form), GPT-2 124M training tokens/s + MFU at T=1024 (B=16 fp32, tf32, bf16,
#            bf16 with LLM_CUDA_FLASH=wmma; B=64 bf16), the peer karpathy/llm.c on the same
#            model, data, B and T in the same run (its train_gpt2cu, bf16, carried when
#            --prepare found its source in $LLMC_SRC) and the ratio, llm-profile's per-op
#            table of a bf16 step, decode tokens/s and where a batch-1 token's time goes
#            (llm-profile --mode decode: the ops' share of it, the rest is the host)
#       A summary table is printed last and written to build/gpu-check/report.txt (and to
#       $OUT/gpu-check-report.txt, with the full log and gpu-check-files.tgz holding the
#       other text outputs, when $OUT is set).
#       A training or greedy-decode comparison that fails is bisected: run again with each
#       optional part of the backend taken out (LLM_CUDA_OFF, kernels/cuda/cuda_off.cu;
#       every part at once is also a row of its own) to name the parts whose absence
#       makes it pass, and the bf16 timing is repeated without them.  GPU_CHECK_BISECT=1
#       bisects passing comparisons too, GPU_CHECK_OFF_NAMES limits the parts tried,
#       GPU_CHECK_STEPS="ops train infer host" runs only the steps named (tests).
#   here, without a GPU:  scripts/gpu-check.sh --emu
#       steps 1-4 against the emulated CUDA build (make CUDA=emu: every .cu compiled by the
#       host compiler against tests/emu, kernels run on the CPU, cuBLAS computed on the
#       CPU): gpu_check --tiny (also with one warp running ahead of the others), 4
#       training steps per comparison, inference; the report in build/gpu-check-emu/.
#       It proves the script, the launchers and the kernels' logic; not their speed,
#       their memory model or the real cuBLAS.  `make test` runs it (tests/cli/gpu_emu.sh).
# Steps whose programs are missing (llm-train, llm-infer) are reported SKIP, not FAIL.
# Exit status: 0 when nothing FAILed, 1 otherwise; "no GPU" skips everything with 0.
# gpu_check draws fresh random inputs each run unless GPU_CHECK_SEED=N.
# Budget: 450 s in all (GPU_CHECK_BUDGET), each step capped by what is left; --quick
# skips the timings.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
CARRY=$ROOT/build/gpu-carry
REP_DIR=$ROOT/build/gpu-check
NSTEPS=20   # training steps per cuda=cpu comparison
SEEDARG=${GPU_CHECK_SEED:+--seed $GPU_CHECK_SEED}   # gpu_check's inputs: random unless set
MODE=run SANITIZE=0 QUICK=0 DRY=0 EMU=0
for a in "$@"; do
  case $a in
    --prepare) MODE=prepare ;;
    --sanitize) SANITIZE=1 ;;
    --quick) QUICK=1 ;;
    --dry-run) DRY=1 QUICK=1 ;;   # plumbing test without a GPU: "cuda" runs use the cpu
    --emu) EMU=1 QUICK=1 ;;       # without a GPU: "cuda" is the emulated device of CUDA=emu
    -h|--help) sed -n '2,/^set -u$/{/^set -u$/d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$a'" >&2; exit 64 ;;
  esac
done

# ---------------------------------------------------------------- prepare (here)
# token files (llm.c format, version 1 = uint16) into $1: byte-level and GPT-2 Tiny
# Shakespeare, from $LLM_DATA or ../shared/data
make_data() {
  local data=${LLM_DATA:-$ROOT/../shared/data}
  mkdir -p "$1"
  python3 - "$data" "$1" <<'PY'
import struct, sys, os
src, dst = sys.argv[1], sys.argv[2]
def write(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks))
text = open(os.path.join(src, "tinyshakespeare/input.txt"), "rb").read()
write(os.path.join(dst, "ts_byte.bin"), list(text))
open(os.path.join(dst, "ts_eval.txt"), "wb").write(text[:2000])
write(os.path.join(dst, "ts_eval.bin"), list(text[:4096]))
write(os.path.join(dst, "ts_eval_small.bin"), list(text[:512]))   # for --emu
raw = open(os.path.join(src, "tinyshakespeare/input.gpt2.u16"), "rb").read()
write(os.path.join(dst, "ts_gpt2.bin"), list(struct.unpack("<%dH" % (len(raw) // 2), raw)))
PY
}

# The training peer: karpathy/llm.c's train_gpt2cu (bf16, cuBLASLt, no cuDNN, one GPU)
# built from the checkout $LLMC_SRC (copied to build/llmc; the checkout is not touched)
# into $1.  Two build fixes, both outside what it computes: CUDA 13's cudaMemAdvise
# takes a cudaMemLocation (its managed-memory fallback), and its Makefile links
# -lnvidia-ml, which a machine without the driver lacks (an empty stand-in then: llm.c
# uses NVML only when nvml.h is found).
build_llmc() {
  local src=${LLMC_SRC:-} b=$ROOT/build/llmc
  [ -n "$src" ] && [ -f "$src/train_gpt2.cu" ] || return 1
  rm -rf "$b" && mkdir -p "$b" && (cd "$src" && tar cf - --exclude=.git .) | (cd "$b" && tar xf -) || return 1
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$b/llmc/cuda_utils.cuh"
  local lp=${LIBRARY_PATH:-}
  if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so ' && [ ! -e /usr/local/cuda/lib64/libnvidia-ml.so ]; then
    mkdir -p "$b/stub" && echo 'int llmkit_nvml_stand_in;' >"$b/stub/s.c" &&
      gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$b/stub/libnvidia-ml.so" "$b/stub/s.c" &&
      lp=$b/stub${lp:+:$lp}
  fi
  echo "gpu-check: building the peer llm.c (train_gpt2cu) from $src" >&2
  (cd "$b" && LIBRARY_PATH=$lp make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 \
     GPU_COMPUTE_CAPABILITY=90) >"$ROOT/build/llmc-build.log" 2>&1 || return 1
  cp "$b/train_gpt2cu" "$1/" &&
    { git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown; } >"$CARRY/LLMC_COMMIT"
}

# The carried programs are built in a tree of their own, build/gpu-src: a copy of the
# working tree's files (tracked and untracked but not ignored, so uncommitted changes go
# too), built there with CUDA=1 only.  The checkout's own build/ may hold objects of
# another mode (a CUDA=0 make, for instance the project checks', run while a CUDA=1 one
# was running leaves a mix that neither make notices): such a mix once linked cuBLAS
# around a CPU-only backend, and gpu_check then answered "not available in this build".
# The copy keeps its objects between prepares (files keep their times: make rebuilds
# what changed); files gone from the tree are gone from the copy.
prepare_tree() {
  local src=$ROOT/build/gpu-src
  mkdir -p "$src" || return 1
  find "$src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} + || return 1
  git -C "$ROOT" ls-files -z -co --exclude-standard |
    (cd "$ROOT" && xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh) |
    tar cf - -C "$ROOT" --null -T - | tar xf - -C "$src" || return 1
  echo "$src"
}

prepare() {
  command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  local src ver
  src=$(prepare_tree) || { echo "gpu-check: cannot copy the tree into build/gpu-src" >&2; return 1; }
  ver=$(git -C "$ROOT" describe --always --dirty --tags 2>/dev/null || echo unknown)
  echo "gpu-check: building $ver with CUDA=1 in build/gpu-src" >&2
  (cd "$src" && make -j2 CUDA=1 VERSION="$ver" all build/tests/test_quant) \
    >"$ROOT/build/gpu-carry-build.log" 2>&1 \
    || { echo "gpu-check: make CUDA=1 failed, see build/gpu-carry-build.log" >&2; return 1; }
  # the carried gpu_check must have the CUDA backend: here, without a GPU, it skips
  local says
  says=$("$src/build/gpu/gpu_check" --tiny 2>&1 | tail -1)
  case $says in
    *"no GPU: skipped"*|*"checks"*) ;;
    *) echo "gpu-check: the CUDA=1 build's gpu_check said: $says" >&2; return 1 ;;
  esac
  rm -rf "$CARRY"; mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/data"
  cp "$src/build/gpu/gpu_check" "$src/build/tests/test_quant" "$CARRY/bin/"
  for p in "$src"/bin/llm-*; do [ -x "$p" ] && cp "$p" "$CARRY/bin/"; done
  # shared libraries outside glibc/libstdc++/CUDA (those the GPU machine has, newer)
  for b in "$CARRY"/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
  while read -r l; do
    case $(basename "$l") in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      libcu*|libnv*|libnccl*) ;;
      *) cp -L "$l" "$CARRY/lib/" ;;
    esac
  done
  build_llmc "$CARRY/bin" ||
    echo "gpu-check: no llm.c peer carried (LLMC_SRC: a karpathy/llm.c checkout; build/llmc-build.log)" >&2
  make_data "$CARRY/data" || echo "gpu-check: no token data carried" >&2
  echo "$ver" >"$CARRY/COMMIT"
  # the run tool carries 64 MiB in all: binaries without debug info and the libraries
  # (OpenBLAS alone is ~35 MB) travel as one xz archive, unpacked on the GPU machine
  strip --strip-debug "$CARRY"/bin/* 2>/dev/null
  XZ_OPT=-T0 tar cJf "$CARRY/bin-lib.tar.xz" -C "$CARRY" bin lib &&
    rm -rf "$CARRY/bin" "$CARRY/lib" ||
    { echo "gpu-check: packing the binaries failed" >&2; return 1; }
  du -sh "$CARRY" >&2
  echo "gpu-check: prepared $CARRY; on the GPU run:" >&2
  echo "  run(command='bash scripts/gpu-check.sh', carry=['build/gpu-carry'], timeout_s=540)" >&2
}

if [ "$MODE" = prepare ]; then prepare; exit $?; fi
if [ $EMU = 1 ]; then REP_DIR=$ROOT/build/gpu-check-emu; NSTEPS=4; SANITIZE=0; fi

# ---------------------------------------------------------------- run (GPU machine)
mkdir -p "$REP_DIR"
LOG=$REP_DIR/log.txt
REPORT=$REP_DIR/report.txt
: >"$LOG"
ROWS=()
FAILS=0
row() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && FAILS=$((FAILS + 1)); return 0; }
log() { echo "$*" | tee -a "$LOG" >&2; }
T0=$(date +%s)
# every step runs under `timeout $(tl N)`: N seconds or what is left of the budget
DEADLINE=$((T0 + ${GPU_CHECK_BUDGET:-450}))
tl() { local left=$((DEADLINE - $(date +%s) - 5)); [ $left -lt 1 ] && left=1; [ $left -lt $1 ] && echo $left || echo $1; }
late() { [ $((DEADLINE - $(date +%s))) -lt ${1:-20} ]; }

# binaries: carried ones first, else a local build.  The carried libraries go into
# LD_LIBRARY_PATH of our programs only (as LDP), never of the machine's own tools.
LDP=${LD_LIBRARY_PATH:-}
# the carried archive is unpacked beside the carry (not into it: the carry stays small)
UNPACK=$ROOT/build/gpu-carry-x
if [ $EMU = 1 ]; then
  log "gpu-check: emulated CUDA build (make CUDA=emu)"
  make -j2 CUDA=emu all >>"$LOG" 2>&1 && make -j2 CUDA=0 build/tests/test_quant >>"$LOG" 2>&1 ||
    row build FAIL "make CUDA=emu failed (see log)"
  BIN=$ROOT/build/gpu-emu-bin
  rm -rf "$BIN"; mkdir -p "$BIN"
  ln -s "$ROOT/build/emu/gpu/gpu_check" "$ROOT/build/tests/test_quant" "$BIN/"
  for p in "$ROOT"/build/emu/bin/llm-*; do [ -x "$p" ] && ln -s "$p" "$BIN/"; done
  DATA=$ROOT/build/gpu-emu-data
  [ -f "$DATA/ts_eval_small.bin" ] || make_data "$DATA" >>"$LOG" 2>&1 || log "gpu-check: no token data"
elif [ -f "$CARRY/bin-lib.tar.xz" ]; then
  rm -rf "$UNPACK"; mkdir -p "$UNPACK"
  tar xJf "$CARRY/bin-lib.tar.xz" -C "$UNPACK" || log "gpu-check: cannot unpack $CARRY/bin-lib.tar.xz"
fi
# the commit the report names: the carried binaries' (from --prepare), else this tree's
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)
if [ $EMU = 1 ]; then :
elif [ -x "$UNPACK/bin/gpu_check" ] && [ -f "$CARRY/bin-lib.tar.xz" ]; then
  BIN=$UNPACK/bin
  LDP=$UNPACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null)
  log "gpu-check: carried binaries of commit $COMMIT"
else
  command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  log "gpu-check: no carried binaries; building with CUDA=1"
  if ! make -j16 CUDA=1 all build/tests/test_quant >>"$LOG" 2>&1; then
    row build FAIL "make CUDA=1 failed (no --prepare carry? see log)"
  fi
  BIN=$ROOT/build/gpu-carry-local
  mkdir -p "$BIN"
  cp build/gpu/gpu_check build/tests/test_quant "$BIN/" 2>/dev/null
  for p in bin/llm-*; do [ -x "$p" ] && cp "$p" "$BIN/"; done
fi
# CUDA libraries: rpath /usr/local/cuda/lib64; otherwise look for them.  The programs link
# cuBLAS and the CUDA runtime (ldd names them) and open NCCL when a multi-GPU run starts
# (common/nccl_dl.c), which ldd does not name: look for the file the binaries ask for.
OPENED=$(grep -aoE 'libnccl\.so\.[0-9]+' "$BIN/gpu_check" "$BIN/llm-train" 2>/dev/null |
         sed 's/.*://' | sort -u | tr '\n' ' ')
libs_found() {
  LD_LIBRARY_PATH=$LDP ldd "$BIN/gpu_check" | grep -q 'libcu.*not found' && return 1
  local so d ok IFS=' '
  for so in $OPENED; do
    ok=0
    ldconfig -p 2>/dev/null | grep -q " $so " && ok=1
    IFS=:
    for d in $LDP /usr/local/cuda/lib64; do [ -n "$d" ] && [ -e "$d/$so" ] && ok=1; done
    IFS=' '
    [ $ok = 1 ] || return 1
  done
  return 0
}
if [ -x "$BIN/gpu_check" ] && ! libs_found; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia,os;print(" ".join(os.path.join(p,q,"lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
    [ -d "$d" ] && ls "$d"/libcu* "$d"/libnccl* 2>/dev/null | grep -q . && LDP=$LDP:$d
  done
  if ! libs_found; then   # what ldd misses and what the programs open, anywhere
    for so in $(LD_LIBRARY_PATH=$LDP ldd "$BIN/gpu_check" | awk '/not found/{print $1}') $OPENED; do
      d=$(find /usr /opt -name "$so" 2>/dev/null | head -1)
      [ -n "$d" ] && LDP=$LDP:$(dirname "$d")
    done
  fi
  LD_LIBRARY_PATH=$LDP ldd "$BIN/gpu_check" | grep 'not found' | tee -a "$LOG" >&2
  libs_found || echo "gpu-check: one of $OPENED not found" | tee -a "$LOG" >&2
fi
[ $EMU = 1 ] || DATA=$CARRY/data
[ -f "$DATA/ts_byte.bin" ] || DATA=
EVAL=$DATA/ts_eval.bin   # the emulated device is ~1000x slower: a shorter text there
[ $EMU = 1 ] && [ -f "$DATA/ts_eval_small.bin" ] && EVAL=$DATA/ts_eval_small.bin

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader >>"$LOG" 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

# GPU_CHECK_STEPS (tests): only the steps named, of "ops train infer host"; unset: all
want() { [ -z "${GPU_CHECK_STEPS:-}" ] || [[ " $GPU_CHECK_STEPS " == *" $1 "* ]]; }

# 1. every op --------------------------------------------------------------------
if ! want ops; then :
elif [ ! -x "$BIN/gpu_check" ]; then
  row "ops vs reference" FAIL "no gpu_check binary"
else
  env LD_LIBRARY_PATH="$LDP" timeout $(tl 240) "$BIN/gpu_check" --out "$REP_DIR/ops.txt" \
    $([ $EMU = 1 ] && echo --tiny) $SEEDARG >"$REP_DIR/ops.log" 2>&1
  rc=$?
  cat "$REP_DIR/ops.log" >>"$LOG"
  if grep -q "no GPU: skipped" "$REP_DIR/ops.log" && [ $DRY = 1 ]; then
    # the harness itself, with the fast CPU backend standing in for cuda
    if env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$BIN/gpu_check" --device cpu --tiny >"$REP_DIR/ops.log" 2>&1
    then row "ops harness (cpu for cuda)" PASS "$(grep -m1 '^gpu_check: [0-9]* checks' "$REP_DIR/ops.log" | sed 's/gpu_check: //')"
    else row "ops harness (cpu for cuda)" FAIL "see ops.log"; fi
  elif grep -q "not available in this build" "$REP_DIR/ops.log"; then
    row "ops vs reference" FAIL "gpu_check was built without the CUDA backend: run --prepare again"
  elif grep -q "no GPU: skipped" "$REP_DIR/ops.log"; then
    cat "$REP_DIR/ops.log"
    echo "gpu-check: no GPU: skipped"
    exit 0
  else
    sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$REP_DIR/ops.log")
    if [ $rc = 0 ]; then row "ops vs reference" PASS "${sum#gpu_check: }"
    else row "ops vs reference" FAIL "rc=$rc ${sum#gpu_check: }; $(grep -c FAIL "$REP_DIR/ops.log") FAIL rows (ops.txt)"; fi
    grep "FAIL\|cuda error" "$REP_DIR/ops.log" | head -20 >&2
    [ -z "$sum" ] && tail -15 "$REP_DIR/ops.log" >&2   # it did not get far: show why
    if [ $EMU = 1 ]; then   # a missing barrier shows when one warp runs ahead
      LLM_EMU_ORDER=3 env LD_LIBRARY_PATH="$LDP" timeout $(tl 240) "$BIN/gpu_check" --tiny $SEEDARG \
        --out "$REP_DIR/ops-skew.txt" >"$REP_DIR/ops-skew.log" 2>&1
      rc=$?
      sum=$(grep -m1 '^gpu_check: [0-9]* checks' "$REP_DIR/ops-skew.log")
      if [ $rc = 0 ]; then row "ops, warps skewed (emu)" PASS "${sum#gpu_check: }"
      else row "ops, warps skewed (emu)" FAIL "rc=$rc ${sum#gpu_check: } (ops-skew.log)"; fi
    fi
  fi
fi

# the four ops of an llm-profile table (file $1) whose time exceeds their time at the
# peaks by the most: "op site +X ms (roof Y%)", and the whole table's roof%
roof_lost() {
  awk 'NF >= 12 && $1 != "op" && $1 != "total" && $12 ~ /^[0-9.]+$/ {
         printf "%.3f %s %s %.1f\n", $5 * (1 - $12 / 100), $1, $2, $12 }' "$1" |
    sort -gr | head -4 | awk '{printf "%s%s %s +%s ms (roof %s%%)", (NR > 1 ? ", " : ""), $2, $3, $1, $4}'
  awk '$1 == "total" && $NF ~ /^[0-9.]+$/ {printf "; whole step at %s%% of its roofline", $NF}' "$1"
}

# helpers for llm-train / llm-infer ------------------------------------------------
have() { [ -x "$BIN/$1" ]; }
# losses from JSON metric lines (one per step), in step order
losses() { grep -o '"loss": *[-0-9.eE+naif]*' "$1" | sed 's/.*: *//'; }
cmp_losses() {  # file_a file_b tol -> prints worst rel diff, returns 0 when <= tol
  paste <(losses "$1") <(losses "$2") | awk -v tol="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; m = ($2 < 0 ? -$2 : $2); if (m < 1e-30) m = 1e-30;
      r = d / m; if (r > w || $1 != $1 + 0) w = r }
    END { printf "%d steps, worst rel %.2e\n", n, w; exit !(n >= 1 && w <= tol) }'
}
tiny_cfg() {  # path steps device [extra yaml]
  cat >"$1" <<Y
model: {arch: gpt2, n_layer: 2, n_head: 4, n_embd: 128, vocab_size: 257, max_seq_len: 128}
data: {train: $DATA/ts_byte.bin, val: $DATA/ts_byte.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 128, max_steps: $2, lr: 0.001, warmup_steps: 2, save_every: 100000, seed: 7, threads: 8, device: $3, eval_every: 0, eval_batches: 2}
Y
}

# LLM_CUDA_OFF (kernels/cuda/cuda_off.cu): the optional parts of the backend, each of
# which can be taken out (the model then runs the fallback backend.h documents)
OFF_NAMES=$( [ -x "$BIN/gpu_check" ] && [ $DRY = 0 ] &&
  LD_LIBRARY_PATH=$LDP "$BIN/gpu_check" --off-names 2>/dev/null | tr '\n' ' ')
[ -n "${GPU_CHECK_OFF_NAMES:-}" ] && OFF_NAMES=$GPU_CHECK_OFF_NAMES   # a subset (tests)
BLAME=""   # the parts bisections found (space-separated), for the timings
# try_train PREC OFF: the tiny cuda run of PREC (fp32|bf16|fp16) again with
# LLM_CUDA_OFF=OFF, against its cpu run; 0 when within the bound; $TRY the comparison
try_train() {
  local p=$1 off=$2 f tol=2e-2 pre=""
  [ "$p" = fp32 ] && tol=1e-4
  [ "$p" != fp32 ] && pre="$p-"
  f=$REP_DIR/tiny-${pre}off-$off
  rm -rf "$f" "$f.jsonl"
  LLM_CUDA_OFF=$off env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$BIN/llm-train" \
    --config "$REP_DIR/tiny-${pre}cuda.yaml" $([ "$p" = fp32 ] || echo --precision $p) \
    -o "$f" --metrics "$f.jsonl" >>"$LOG" 2>&1
  TRY=$(cmp_losses "$f.jsonl" "$REP_DIR/tiny-${pre}cpu.jsonl" $tol)
}
# bisect LABEL CMD: CMD OFF reruns a failed comparison with LLM_CUDA_OFF=OFF and returns
# 0 when it passes.  One row: the parts whose absence alone makes it pass (each tried
# alone), or that only all of them off does (two parts or more), or that even that does
# not (a required op: see the ops table).  The original row has already failed.
bisect() {
  local label=$1 cmd=$2 n fixed="" cut=""
  if [ -z "$OFF_NAMES" ]; then row "$label: bisect" SKIP "no part names (gpu_check --off-names)"; return; fi
  if ! $cmd all; then row "$label: bisect" INFO "fails with LLM_CUDA_OFF=all too: a required op (ops table)"; return; fi
  for n in $OFF_NAMES; do
    late 40 && { cut=" (out of time before the rest)"; break; }
    $cmd "$n" && fixed="$fixed $n"
  done
  fixed=${fixed# }
  if [ -n "$fixed" ]; then
    row "$label: bisect" INFO "passes with LLM_CUDA_OFF= each of: $fixed$cut"
    BLAME=$(printf '%s\n' $BLAME $fixed | sort -u | tr '\n' ' ')
  else
    row "$label: bisect" INFO "passes with LLM_CUDA_OFF=all only (two parts or more)$cut"
    BLAME="$BLAME all"
  fi
}

# 2. training: cuda vs cpu ----------------------------------------------------------
if ! want train; then :
elif ! have llm-train; then row "train $NSTEPS steps cuda=cpu" SKIP "no llm-train binary"
elif [ -z "$DATA" ]; then row "train $NSTEPS steps cuda=cpu" SKIP "no token data carried"
elif ! LD_LIBRARY_PATH=$LDP "$BIN/llm-train" --help 2>&1 | grep -q -- "device\|--set"; then
  row "train $NSTEPS steps cuda=cpu" SKIP "llm-train has no device option"
else
  for dev in cpu cuda; do
    tiny_cfg "$REP_DIR/tiny-$dev.yaml" $NSTEPS $([ $DRY = 1 ] && echo cpu || echo $dev)
    rm -rf "$REP_DIR/tiny-$dev" "$REP_DIR/tiny-$dev.jsonl"   # --metrics appends
    env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$BIN/llm-train" --config "$REP_DIR/tiny-$dev.yaml" -o "$REP_DIR/tiny-$dev" \
      --metrics "$REP_DIR/tiny-$dev.jsonl" >>"$LOG" 2>&1
    echo "train $dev rc=$?" >>"$LOG"
  done
  if r=$(cmp_losses "$REP_DIR/tiny-cuda.jsonl" "$REP_DIR/tiny-cpu.jsonl" 1e-4); then
    row "train $NSTEPS steps cuda=cpu (fp32)" PASS "$r (bound 1e-4)"
  else row "train $NSTEPS steps cuda=cpu (fp32)" FAIL "$r (bound 1e-4)"; fi
  # device health in the metrics: every cuda step line has the memory fields, cpu none
  if [ $DRY = 0 ]; then
    n=$(grep -c '"loss"' "$REP_DIR/tiny-cuda.jsonl" 2>/dev/null); n=${n:-0}
    g=$(grep '"loss"' "$REP_DIR/tiny-cuda.jsonl" 2>/dev/null | grep '"gpu_mem_mb":[0-9.]*[1-9]' | grep -c '"gpu_mem_peak_mb":[0-9.]*[1-9]')
    c=$(grep -c '"gpu_' "$REP_DIR/tiny-cpu.jsonl" 2>/dev/null)
    last=$(grep '"loss"' "$REP_DIR/tiny-cuda.jsonl" 2>/dev/null | tail -1 | grep -o '"gpu_[a-z_]*":[-0-9.eE+]*' | tr '\n' ' ')
    if [ "$n" -gt 0 ] && [ "$g" = "$n" ] && [ "${c:-1}" = 0 ]; then row "train metrics gpu_* fields" PASS "$last"
    else row "train metrics gpu_* fields" FAIL "$g of $n cuda lines with memory, $c cpu lines with gpu_*: $last"; fi
  fi
  # mixed precision: the same run under --precision bf16 / fp16 on cuda and on cpu
  if ! LD_LIBRARY_PATH=$LDP "$BIN/llm-train" --help 2>&1 | grep -q -- "--precision"; then
    echo "gpu-check: this llm-train has no --precision (mixed precision not merged): bf16/fp16 training skipped" >&2
    row "train $NSTEPS steps cuda=cpu (bf16)" SKIP "llm-train has no --precision"
    row "train $NSTEPS steps cuda=cpu (fp16)" SKIP "llm-train has no --precision"
  else
    for p in bf16 fp16; do
      for dev in cpu cuda; do
        tiny_cfg "$REP_DIR/tiny-$p-$dev.yaml" $NSTEPS $([ $DRY = 1 ] && echo cpu || echo $dev)
        rm -rf "$REP_DIR/tiny-$p-$dev" "$REP_DIR/tiny-$p-$dev.jsonl"
        env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$BIN/llm-train" --config "$REP_DIR/tiny-$p-$dev.yaml" --precision $p \
          -o "$REP_DIR/tiny-$p-$dev" --metrics "$REP_DIR/tiny-$p-$dev.jsonl" >>"$LOG" 2>&1
        echo "train $p $dev rc=$?" >>"$LOG"
      done
      if r=$(cmp_losses "$REP_DIR/tiny-$p-cuda.jsonl" "$REP_DIR/tiny-$p-cpu.jsonl" 2e-2); then
        row "train $NSTEPS steps cuda=cpu ($p)" PASS "$r (bound 2e-2)"
      else row "train $NSTEPS steps cuda=cpu ($p)" FAIL "$r (bound 2e-2)"; fi
      # how far the lo run is from fp32 on cuda (informative: not fp32, but close)
      r=$(cmp_losses "$REP_DIR/tiny-$p-cuda.jsonl" "$REP_DIR/tiny-cuda.jsonl" 1)
      row "train cuda $p vs fp32" INFO "$r"
    done
    # the attention's batched-GEMM form end to end (the fused kernel is the default)
    rm -rf "$REP_DIR/tiny-bf16-nf" "$REP_DIR/tiny-bf16-nf.jsonl"
    LLM_CUDA_FLASH=0 env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$BIN/llm-train" --config "$REP_DIR/tiny-bf16-cuda.yaml" \
      --precision bf16 -o "$REP_DIR/tiny-bf16-nf" --metrics "$REP_DIR/tiny-bf16-nf.jsonl" >>"$LOG" 2>&1
    if r=$(cmp_losses "$REP_DIR/tiny-bf16-nf.jsonl" "$REP_DIR/tiny-bf16-cpu.jsonl" 2e-2); then
      row "train cuda=cpu (bf16, no flash)" PASS "$r (bound 2e-2)"
    else row "train cuda=cpu (bf16, no flash)" FAIL "$r (bound 2e-2)"; fi
    # the fallbacks themselves: every optional part of the backend off
    if [ -n "$OFF_NAMES" ]; then
      if try_train bf16 all; then row "train cuda=cpu (bf16, LLM_CUDA_OFF=all)" PASS "$TRY (bound 2e-2)"
      else row "train cuda=cpu (bf16, LLM_CUDA_OFF=all)" FAIL "$TRY (bound 2e-2)"; fi
    fi
  fi
  # a training comparison that failed: which optional part, taken out, makes it pass
  for p in fp32 bf16 fp16; do
    if [ -n "${GPU_CHECK_BISECT:-}" ] || grep -q "^train $NSTEPS steps cuda=cpu ($p) *FAIL" <(printf '%s\n' "${ROWS[@]}"); then
      bisect "train cuda=cpu ($p)" "try_train $p"
    fi
  done
fi

# 3. inference: KV-cache decode and full forward, cuda vs cpu -----------------------------
CK=$(ls "$REP_DIR"/tiny-cuda/*.llmk 2>/dev/null | sort | tail -1)
if ! want infer; then :
elif ! have llm-infer; then row "infer decode cuda=cpu" SKIP "no llm-infer binary"
elif [ -z "$CK" ]; then row "infer decode cuda=cpu" SKIP "no checkpoint from step 2"
else
  for dev in cpu cuda; do
    d=$dev; [ $DRY = 1 ] && d=cpu
    env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-infer" "$CK" --device $d -p "ROMEO:" -n 48 --temperature 0 \
      >"$REP_DIR/gen-$dev.txt" 2>>"$LOG"
    env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-infer" "$CK" --device $d --eval "$EVAL" \
      >"$REP_DIR/eval-$dev.json" 2>>"$LOG"
    # sampled, 4 requests decoded together: several cache slots at different positions
    printf '%s\n' '{"prompt": "ROMEO:", "max_tokens": 64, "temperature": 0.8, "seed": 11}' \
      '{"prompt": "First Citizen:\nBefore we proceed", "max_tokens": 40, "temperature": 0.8, "seed": 12}' \
      '{"prompt": "KING", "max_tokens": 80, "temperature": 0.8, "seed": 13}' \
      '{"prompt": "O", "max_tokens": 64, "temperature": 0, "seed": 14}' |
      env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-infer" "$CK" --device $d --jsonl --batch 4 \
      2>>"$LOG" | grep -o '"text": *"\([^"\\]\|\\.\)*"' | sort >"$REP_DIR/batch-$dev.txt"
  done
  if [ -s "$REP_DIR/gen-cpu.txt" ] && cmp -s "$REP_DIR/gen-cpu.txt" "$REP_DIR/gen-cuda.txt"; then
    row "infer greedy decode cuda=cpu" PASS "48 tokens identical"
  elif [ -s "$REP_DIR/gen-cpu.txt" ]; then row "infer greedy decode cuda=cpu" FAIL "generations differ (gen-*.txt)"
  else row "infer greedy decode cuda=cpu" SKIP "llm-infer gave no output (see log)"; fi
  if [ -s "$REP_DIR/batch-cpu.txt" ] && cmp -s "$REP_DIR/batch-cpu.txt" "$REP_DIR/batch-cuda.txt"; then
    row "infer batch-4 sampled cuda=cpu" PASS "$(wc -l <"$REP_DIR/batch-cpu.txt") texts identical"
  elif [ -s "$REP_DIR/batch-cpu.txt" ]; then row "infer batch-4 sampled cuda=cpu" FAIL "texts differ (batch-*.txt)"
  else row "infer batch-4 sampled cuda=cpu" SKIP "llm-infer --jsonl gave no output (see log)"; fi
  # a greedy decode that differed: which optional part, taken out, makes it equal
  try_decode() {
    LLM_CUDA_OFF=$1 env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-infer" "$CK" --device cuda -p "ROMEO:" \
      -n 48 --temperature 0 >"$REP_DIR/gen-off-$1.txt" 2>>"$LOG" && cmp -s "$REP_DIR/gen-cpu.txt" "$REP_DIR/gen-off-$1.txt"
  }
  if [ $DRY = 0 ] && { [ -n "${GPU_CHECK_BISECT:-}" ] ||
     grep -q "^infer greedy decode cuda=cpu *FAIL" <(printf '%s\n' "${ROWS[@]}"); }; then
    bisect "infer greedy decode cuda=cpu" try_decode
  fi
  a=$(grep -o '"nll": *[-0-9.eE+]*' "$REP_DIR/eval-cuda.json" | sed 's/.*: *//')
  b=$(grep -o '"nll": *[-0-9.eE+]*' "$REP_DIR/eval-cpu.json" | sed 's/.*: *//')
  if [ -n "$a" ] && [ -n "$b" ]; then
    if awk -v a="$a" -v b="$b" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 1e-4*(b<0?-b:b))}'; then
      row "infer full-forward nll cuda=cpu" PASS "$a vs $b"
    else row "infer full-forward nll cuda=cpu" FAIL "$a vs $b"; fi
  else row "infer full-forward nll cuda=cpu" SKIP "no nll in --eval output"; fi
fi

# 4. host CPU: the SIMD quantized kernels (our own machine lacks AVX-512) ----------------
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
        grep -xE 'avx2|avx512f|avx512bw|avx512_vnni|avx512vnni|avx512_bf16|f16c' | sort -u | tr '\n' ' ')
want host && row "host CPU" INFO "${cpu:-unknown} ($(nproc 2>/dev/null) cpus): ${flags:-no listed SIMD flags}"
if ! want host; then :
elif [ ! -x "$BIN/test_quant" ]; then row "quant kernels on host CPU" SKIP "no test_quant binary"
else
  env LD_LIBRARY_PATH="$LDP" OMP_WAIT_POLICY=passive timeout $(tl 120) "$BIN/test_quant" >"$REP_DIR/test_quant.log" 2>&1
  rc=$?
  cat "$REP_DIR/test_quant.log" >>"$LOG"
  isa=$(grep -m1 '# fast kernels checked' "$REP_DIR/test_quant.log" | sed 's/^# *//')
  ran=$(grep -c '^\[       OK \]' "$REP_DIR/test_quant.log")
  if [ $rc = 0 ] && [ -n "$isa" ]; then row "quant kernels on host CPU" PASS "$ran tests; $isa"
  else row "quant kernels on host CPU" FAIL "rc=$rc; ${isa:-no kernel summary} (test_quant.log)"; fi
  grep -m1 'not tested' "$REP_DIR/test_quant.log" >&2
fi

# 5. sanitizers ------------------------------------------------------------------
if [ $SANITIZE = 1 ]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$CS" ]; then row "compute-sanitizer" SKIP "not installed"
  else
    for tool in memcheck racecheck; do
      env LD_LIBRARY_PATH="$LDP" timeout $(tl 150) "$CS" --tool $tool --error-exitcode 99 "$BIN/gpu_check" --tiny \
        >"$REP_DIR/san-$tool.log" 2>&1
      rc=$?
      cat "$REP_DIR/san-$tool.log" >>"$LOG"
      e=$(grep -m1 "ERROR SUMMARY" "$REP_DIR/san-$tool.log")
      if [ $rc = 0 ]; then row "sanitizer $tool (ops, tiny)" PASS "${e:-clean}"
      else row "sanitizer $tool (ops, tiny)" FAIL "rc=$rc ${e}"; fi
      if have llm-train && [ -n "$DATA" ]; then
        tiny_cfg "$REP_DIR/san.yaml" 2 cuda
        rm -rf "$REP_DIR/san"
        env LD_LIBRARY_PATH="$LDP" timeout $(tl 120) "$CS" --tool $tool --error-exitcode 99 "$BIN/llm-train" --config "$REP_DIR/san.yaml" \
          -o "$REP_DIR/san" >"$REP_DIR/san-train-$tool.log" 2>&1
        rc=$?
        cat "$REP_DIR/san-train-$tool.log" >>"$LOG"
        e=$(grep -m1 "ERROR SUMMARY" "$REP_DIR/san-train-$tool.log")
        if [ $rc = 0 ]; then row "sanitizer $tool (train step)" PASS "${e:-clean}"
        else row "sanitizer $tool (train step)" FAIL "rc=$rc ${e}"; fi
      fi
    done
  fi
fi

# 6. timings ---------------------------------------------------------------------
if [ -x "$BIN/gpu_check" ] && [ $QUICK = 0 ] && ! late 30; then
  env LD_LIBRARY_PATH="$LDP" timeout $(tl 150) "$BIN/gpu_check" --bench --bench-batch 8 --out "$REP_DIR/bench.txt" >"$REP_DIR/bench.log" 2>&1
  cat "$REP_DIR/bench.log" >>"$LOG"
  for m in fp32 tf32 bf16; do
    l=$(grep "gemm 4096^3 $m" "$REP_DIR/bench.log")
    if [ -n "$l" ]; then row "cuBLASLt GEMM 4096^3 $m" INFO "$(echo "$l" | sed "s/gemm 4096^3 $m *//")"
    else row "cuBLASLt GEMM 4096^3 $m" FAIL "no result"; fi
  done
  row "op times (B=8,T=1024,GPT-2 124M)" INFO "see bench.txt: $(grep -c '^time' "$REP_DIR/bench.log") ops"
  # the fused attention's kernel sets side by side (mma.sync = "fused", the WMMA ones, the
  # batched-GEMM form): ms and TFLOP/s of the causal FLOPs, forward / backward
  for k in fused wmma gemm; do
    f=$(grep "^time attention_lse_fwd $k " "$REP_DIR/bench.log" | awk '{printf "%s ms %s TFLOP/s", $4, $6}')
    b=$(grep "^time attention_lse_bwd $k " "$REP_DIR/bench.log" | awk '{printf "%s ms %s TFLOP/s", $4, $6}')
    [ -n "$f$b" ] && row "attention $([ $k = fused ] && echo mma.sync || echo $k) B8 T1024" INFO "fwd ${f:-?}, bwd ${b:-?}"
  done
  # the classifier's loss + gradient: one fused pass against the forward and the backward
  bench_ms() { grep -m1 "^time $1 " "$REP_DIR/bench.log" | awk '{print $3}'; }
  fu=$(bench_ms xent_fused_lo) fw=$(bench_ms xent_fwd_lo) bw=$(bench_ms xent_bwd_lo)
  [ -n "$fu$fw$bw" ] && row "xent lo fused vs fwd+bwd B8 T1024" INFO "fused ${fu:-?} ms, fwd ${fw:-?} + bwd ${bw:-?} ms"
fi
# GPT-2 124M training throughput (fp32; TF32 via LLM_CUDA_TF32=1; bf16 with --precision
# when llm-train has it), MFU against the bf16
# dense peak of an H200 (989 TFLOP/s) and the plain fp32 peak (67 TFLOP/s)
if have llm-train && [ -n "$DATA" ] && [ $QUICK = 0 ] && [ -f "$DATA/ts_gpt2.bin" ] && ! late 60; then
  modes="0 1"
  LD_LIBRARY_PATH=$LDP "$BIN/llm-train" --help 2>&1 | grep -q -- "--precision" && modes="0 1 bf16 bf16wmma bf16b64"
  # a bisection above found parts that break training: bf16 timed without them too
  OFF=$(echo $BLAME | tr ' ' ','); case ",$OFF," in *,all,*) OFF=all ;; esac
  [ -n "$OFF" ] && modes=${modes/bf16 /bf16 bf16off }
  # (a bf16 B16 run that gives no rate is tried once more with every optional part off)
  mlist=($modes)
  for ((mi = 0; mi < ${#mlist[@]}; mi++)); do
    tf=${mlist[mi]} prec=fp32 bs=16 flash=1 off=""
    case $tf in bf16) prec=bf16 ;; bf16wmma) prec=bf16 flash=wmma ;; bf16b64) prec=bf16 bs=64 ;;
                bf16off) prec=bf16 off=$OFF ;; bf16all) prec=bf16 off=all ;; esac
    late 40 && break
    cat >"$REP_DIR/gpt2.yaml" <<Y
model: {arch: gpt2, n_layer: 12, n_head: 12, n_embd: 768, vocab_size: 50257, max_seq_len: 1024}
data: {train: $DATA/ts_gpt2.bin, val: $DATA/ts_gpt2.bin, tokenizer: gpt2}
train: {batch_size: $bs, seq_len: 1024, max_steps: 8, lr: 0.0006, warmup_steps: 2, save_every: 100000, seed: 1, threads: 8, device: cuda, eval_every: 0}
Y
    rm -f "$REP_DIR/gpt2-tf$tf.jsonl"
    # the checkpoint of the B=16 runs serves the decode timings below
    [ $bs = 16 ] && rm -rf "$REP_DIR/gpt2run"
    LLM_CUDA_OFF=$off LLM_CUDA_FLASH=$flash LLM_CUDA_TF32=$([ $tf = 1 ] && echo 1 || echo 0) env LD_LIBRARY_PATH="$LDP" timeout $(tl 150) "$BIN/llm-train" --config "$REP_DIR/gpt2.yaml" \
      -o "$REP_DIR/gpt2run$([ $bs = 16 ] || echo -b$bs)" \
      $([ $prec = bf16 ] && echo --precision bf16) --metrics "$REP_DIR/gpt2-tf$tf.jsonl" >>"$LOG" 2>&1
    rm -rf "$REP_DIR/gpt2run-b$bs"
    tps=$(grep -o '"tokens_per_s": *[0-9.eE+]*' "$REP_DIR/gpt2-tf$tf.jsonl" 2>/dev/null | sed 's/.*: *//' | tail -n +3 | sort -g | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]}')
    name="GPT-2 124M train B$bs T1024 $([ $tf = 1 ] && echo tf32 || echo $prec)$([ $flash = wmma ] && echo ' (WMMA flash)')${off:+ (LLM_CUDA_OFF=$off)}"
    peak=$(grep -o '"gpu_mem_peak_mb":[0-9.]*' "$REP_DIR/gpt2-tf$tf.jsonl" 2>/dev/null | tail -1 | sed 's/.*://')
    [ "$tf" = bf16 ] && TPS_BF16=$tps
    if [ -n "$tps" ]; then
      # flops/token = 6 N + 6 L C T (llm.c's count, as llm-train's mfu), N = 124475904 with Vp 50304
      row "$name" INFO "$(awk -v t="$tps" 'BEGIN{f=6*124475904+6*12*768*1024; printf "%.0f tok/s, MFU %.1f%% of bf16 peak, %.1f%% of fp32 peak", t, 100*t*f/989e12, 100*t*f/67e12}')${peak:+, held peak $peak MiB}"
    else
      row "$name" FAIL "no tokens_per_s (see log)"
      [ "$tf" = bf16 ] && [ "$OFF" != all ] && mlist+=(bf16all)
    fi
  done
  # the peer on the same model (GPT-2 124M from scratch: -e d12), data, B=16 and T=1024,
  # bf16 with its defaults (GELU recomputed in the backward, as here), in this run: the
  # ratio of the two rates is the comparison (llm.c prints ms per step; its tok/s is a
  # moving average)
  if have train_gpt2cu && ! late 50; then
    mkdir -p "$REP_DIR/llmc"
    (cd "$REP_DIR/llmc" && env LD_LIBRARY_PATH="$LDP" timeout $(tl 90) "$BIN/train_gpt2cu" \
       -i "$DATA/ts_gpt2.bin" -j "$DATA/ts_gpt2.bin" -e d12 -b 16 -t 1024 -x 12 -l 0.0006 \
       -u 2 -v 100000 -s 100000 -g 8 -n 0) >"$REP_DIR/llmc.log" 2>&1
    lms=$(grep '^step' "$REP_DIR/llmc.log" | grep -o '| *[0-9.]* ms |' | tr -dc '0-9.\n' | tail -n +3 |
          sort -g | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]}')
    if [ -n "$lms" ]; then
      row "llm.c GPT-2 124M train B16 T1024" INFO "$(awk -v ms="$lms" -v us="${TPS_BF16:-}" -v c="$(cat "$CARRY/LLMC_COMMIT" 2>/dev/null)" \
        'BEGIN{t=16*1024*1000/ms; printf "%.0f tok/s (llm.c %s, bf16, median of steps 3-12)", t, c; if (us != "") printf "; llmkit bf16 / llm.c = %.3f", us/t}')"
    else row "llm.c GPT-2 124M train B16 T1024" FAIL "no step times (llmc.log)"; fi
  elif [ $QUICK = 0 ]; then row "llm.c GPT-2 124M train B16 T1024" SKIP "no peer carried (prepare with LLMC_SRC)"
  fi
  # where a bf16 step's time goes: llm-profile's per-op table (CUDA events around each op)
  if have llm-profile && [ "${modes#*bf16}" != "$modes" ] && ! late 40; then
    sed 's/batch_size: [0-9]*/batch_size: 16/' "$REP_DIR/gpt2.yaml" >"$REP_DIR/gpt2-prof.yaml"
    env LD_LIBRARY_PATH="$LDP" timeout $(tl 90) "$BIN/llm-profile" --config "$REP_DIR/gpt2-prof.yaml" \
      -b 16 -t 1024 -s 3 -w 1 -d cuda -p bf16 --peak-gflops 989000 --peak-gbs 4800 \
      >"$REP_DIR/profile-bf16.txt" 2>&1
    ms=$(grep -m1 'ms per step' "$REP_DIR/profile-bf16.txt" | sed 's/^# *//; s/ per step.*//')
    top=$(awk '$1 != "op" && $1 !~ /^#/ && NF >= 6 && $1 != "total" {printf "%s%s %s%%", (n ? ", " : ""), $1, $6; if (++n == 4) exit}' "$REP_DIR/profile-bf16.txt")
    if [ -n "$ms" ]; then row "GPT-2 124M bf16 B16 per-op profile" INFO "$ms/step: $top (profile-bf16.txt)"
    else row "GPT-2 124M bf16 B16 per-op profile" FAIL "no profile (profile-bf16.txt)"; fi
    # where the step is furthest from the roofline (989 TFLOP/s, 4.8 TB/s): each op's
    # time less its time at the peaks (roof%), the four largest
    lost=$(roof_lost "$REP_DIR/profile-bf16.txt")
    [ -n "$lost" ] && row "bf16 B16 ms over the roofline" INFO "$lost"
  fi
  # decode tokens/s at batch 1 and 32 from the GPT-2 run's checkpoint
  G=$(ls "$REP_DIR"/gpt2run/*.llmk 2>/dev/null | sort | tail -1)
  if have llm-infer && [ -n "$G" ]; then
    for v in 1 1nograph 32 32nograph; do
      # nb requests decoded together (-f would make one prompt of the whole file); by
      # default the decode steps run as recorded CUDA graphs, "nograph" launches every
      # kernel (LLM_CUDA_GRAPHS=0)
      # (token ids: the checkpoint may have no tokenizer when no GPT-2 vocabulary was carried)
      nb=${v%nograph} graphs=1 what=""
      [ "$v" != "$nb" ] && graphs=0 what=", no CUDA graphs"
      yes '{"tokens": [464, 5822, 531], "max_tokens": 128, "temperature": 0}' | head -$nb |
        env LD_LIBRARY_PATH="$LDP" LLM_CUDA_GRAPHS=$graphs timeout $(tl 60) "$BIN/llm-infer" "$G" --device cuda \
        --batch $nb --jsonl --stats >"$REP_DIR/decode-$v.out" 2>"$REP_DIR/decode-$v.err"
      d=$(grep -o '"decode_tokens_per_s": *[0-9.eE+]*' "$REP_DIR/decode-$v.err" | sed 's/.*: *//' | tail -1)
      cat "$REP_DIR/decode-$v.err" >>"$LOG"
      if [ -n "$d" ]; then row "GPT-2 124M decode batch $nb$what" INFO "$d tok/s"
      else row "GPT-2 124M decode batch $nb$what" SKIP "no decode_tokens_per_s"; fi
      # the two runs' tokens must agree (greedy: the recordings run the same kernels)
      if [ $graphs = 0 ] && [ -s "$REP_DIR/decode-$nb.out" ]; then
        toks() { grep -o '"tokens": *\[[^]]*\]' "$1"; }
        t1=$(toks "$REP_DIR/decode-$nb.out") t2=$(toks "$REP_DIR/decode-$v.out")
        if ! echo "$t1" | grep -q '[0-9]'; then
          row "decode batch $nb graphs = no graphs" FAIL "no tokens decoded (decode-$nb.out)"
        elif [ "$t1" = "$t2" ]; then
          row "decode batch $nb graphs = no graphs" PASS "$nb x 128 tokens identical"
        else row "decode batch $nb graphs = no graphs" FAIL "tokens differ (decode-$nb.out, decode-$v.out)"; fi
      fi
    done
    # the same at batch 32 with sampling (T=0.8, top-k 40: the host's sampler per row,
    # the rows in parallel) beside the greedy row above
    if ! late 30; then
      for i in $(seq 32); do echo "{\"tokens\": [464, 5822, 531], \"max_tokens\": 128, \"temperature\": 0.8, \"top_k\": 40, \"seed\": $i}"; done |
        env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-infer" "$G" --device cuda \
        --batch 32 --jsonl --stats >"$REP_DIR/decode-32sampled.out" 2>"$REP_DIR/decode-32sampled.err"
      d=$(grep -o '"decode_tokens_per_s": *[0-9.eE+]*' "$REP_DIR/decode-32sampled.err" | sed 's/.*: *//' | tail -1)
      cat "$REP_DIR/decode-32sampled.err" >>"$LOG"
      if [ -n "$d" ]; then row "GPT-2 124M decode batch 32, sampled" INFO "$d tok/s (T=0.8, top-k 40)"
      else row "GPT-2 124M decode batch 32, sampled" SKIP "no decode_tokens_per_s"; fi
    fi
    # where a batch-1 token's time goes: the ops' CUDA-event times against the token's
    # wall time (the rest is the host: launches, copies, sampling)
    if have llm-profile && ! late 30; then
      env LD_LIBRARY_PATH="$LDP" timeout $(tl 60) "$BIN/llm-profile" "$G" --mode decode -b 1 -t 256 \
        -s 128 -d cuda >"$REP_DIR/profile-decode-b1.txt" 2>&1
      ms=$(grep -m1 'ms per token' "$REP_DIR/profile-decode-b1.txt" | sed 's/^# *//; s/ ms per token.*//')
      opsms=$(awk '$1 == "total" {print $2; exit}' "$REP_DIR/profile-decode-b1.txt")
      top=$(awk '$1 != "op" && $1 !~ /^#/ && NF >= 6 && $1 != "total" {printf "%s%s %s%%", (n ? ", " : ""), $1, $6; if (++n == 3) exit}' "$REP_DIR/profile-decode-b1.txt")
      if [ -n "$ms" ] && [ -n "$opsms" ]; then
        row "GPT-2 124M decode b1 per-op profile" INFO "$(awk -v ms="$ms" -v o="$opsms" 'BEGIN{printf "%.3f ms/token, ops %.0f%% of it", ms, 100*o/(128*ms)}'): $top (profile-decode-b1.txt)"
      else row "GPT-2 124M decode b1 per-op profile" FAIL "no profile (profile-decode-b1.txt)"; fi
    fi
  else row "GPT-2 124M decode" SKIP "no llm-infer or checkpoint"; fi
elif [ $QUICK = 0 ]; then row "GPT-2 124M train/decode" SKIP "no llm-train or data"
fi

# 7. llm-bench gemm/mem and llm-profile on cuda (tests/gpu/bench_check.sh), if time is left
if [ $QUICK = 0 ] || [ $DRY = 1 ]; then
  if late 45; then row "llm-bench/llm-profile cuda" SKIP "no time left in the budget"
  elif env LD_LIBRARY_PATH="$LDP" OUT= BENCH_CHECK_DEVICE=$([ $DRY = 1 ] && echo cpu || echo cuda) \
      timeout $(tl 120) bash "$ROOT/tests/gpu/bench_check.sh" "$BIN" "$REP_DIR/bench" \
      ${DATA:+"$DATA/ts_byte.bin"} >"$REP_DIR/bench-check.txt" 2>&1
  then row "llm-bench/llm-profile cuda" PASS "$(tail -1 "$REP_DIR/bench-check.txt")"
  else row "llm-bench/llm-profile cuda" FAIL "$(tail -1 "$REP_DIR/bench-check.txt")"; fi
  cat "$REP_DIR/bench-check.txt" >>"$LOG"
fi

# summary --------------------------------------------------------------------------
{
  echo "gpu-check: ${GPU:-unknown GPU}, commit ${COMMIT:-unknown}, $(date -u +%FT%TZ), $(( $(date +%s) - T0 )) s"
  printf '%-34s %-6s %s\n' "check" "result" "detail"
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo "gpu-check: $FAILS failed"
} >"$REPORT"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$REPORT" "$OUT/gpu-check-report.txt"
  cp "$LOG" "$OUT/gpu-check-log.txt"
  # everything else that is text, in one archive (no checkpoints; few files come back)
  (cd "$REP_DIR" && find . -type f -size -8M \( -name '*.txt' -o -name '*.json' -o -name '*.jsonl' \
     -o -name '*.log' -o -name '*.out' -o -name '*.err' -o -name '*.yaml' \) -print0 |
     tar czf "$OUT/gpu-check-files.tgz" --null -T -) 2>/dev/null
fi
[ -f "$REP_DIR/ops.txt" ] && grep -v PASS "$REP_DIR/ops.txt" | head -40
[ -f "$REP_DIR/bench.txt" ] && grep '^time\|^gemm' "$REP_DIR/bench.txt"
cat "$REPORT"
[ $FAILS = 0 ]
