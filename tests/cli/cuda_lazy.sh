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
  # on a node without the toolkit: its library directories (the run path) hidden under
  # empty ones in a private mount namespace (root and unshare(1) needed)
  rp=$(readelf -d "$BIN/llm-train" 2>/dev/null | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\].*/\1/p')
  if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null || [ -z "$rp" ]; then
    skip "a CUDA build on a node without the CUDA toolkit" "needs root and unshare -m"
  else
    mkdir -p "$TMP/empty"
    cat >hide.sh <<EOF
IFS=:; for d in $rp; do [ -d "\$d" ] && mount --bind "$TMP/empty" "\$d" || exit 3; done; unset IFS
[ -z "\$(ls $rp 2>/dev/null)" ] || exit 4
"\$@"
EOF
    expect_exit "toolkit hidden: llm-train trains on the cpu" 0 \
      unshare -m bash hide.sh llm-train --config m.yaml -o hidden --set train.max_steps=1
    expect_exit "toolkit hidden: llm-infer generates on the cpu" 0 \
      unshare -m bash hide.sh llm-infer "$M" -p "ab" -n 4 --temperature 0
    expect_exit "toolkit hidden: --device cuda fails cleanly (69, unavailable)" 69 \
      unshare -m bash hide.sh llm-infer "$M" -p "ab" -n 4 --device cuda
  fi
fi
echo "1..$_n"
