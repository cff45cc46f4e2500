#!/bin/bash
# A CUDA build's programs link the CUDA runtime statically and open cuBLAS (kernels/cuda/
# cublas_dl.c) and NCCL (common/nccl_dl.c) when a run first needs them, not at exec: CPU
# runs neither load them nor need them installed.
. "$(dirname "$0")/lib.sh"
if ! grep -aq 'libcublasLt\.so\.[0-9]' "$BIN/llm-train"; then
  skip "CUDA libraries opened at run time" "not a CUDA=1 build"; exit 0
fi
for p in llm-train llm-infer llm-bench llm-profile; do
  check "$p links no CUDA library (cudart static; cuBLAS, NCCL opened)" \
    bash -c "! ldd '$BIN/$p' | grep -E 'libcu|libnccl'"
done
if [ "$BIN" = "$ROOT/bin" ] && grep -q 'NCCL=1' "$ROOT/build/dist.flags" 2>/dev/null; then
  check "... llm-train names the NCCL library it opens" grep -aq 'libnccl\.so\.[0-9]' "$BIN/llm-train"
fi
# linked, libcublasLt alone put ~210 MB in the resident set at exec (llm-infer --version:
# 225 MB); opened on demand the program starts with its own few MB
rss=$(python3 - "$BIN/llm-infer" <<'PY'
import resource, subprocess, sys
subprocess.run([sys.argv[1], "--version"], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
check "llm-infer --version stays under 64 MB resident (got ${rss:-?} MB)" [ "${rss:-999}" -lt 64 ]
# the cpu paths of a CUDA build train and infer (device auto, no GPU: cuBLAS never opened)
if ! have_data tinyshakespeare/input.txt; then
  skip "training and inference on a CUDA build's cpu path" "no $DATA/tinyshakespeare"
else
  cd "$TMP" || exit 1
  tiny_data
  tiny_model 2
  ok "llm-train on a CUDA build's cpu path"
  expect_exit "llm-infer on a CUDA build's cpu path" 0 llm-infer "$M" -p "ab" -n 4 --temperature 0
fi
echo "1..$_n"
