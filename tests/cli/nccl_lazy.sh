#!/bin/bash
# A CUDA build links cuBLAS and the CUDA runtime (the build's contract: packagers and
# shared/checks/08 read the dependencies off the binaries) but opens NCCL only when a run
# of several GPU ranks starts (common/nccl_dl.c): NCCL is a separate package, and where it
# is missing the programs still start and run everything else.
. "$(dirname "$0")/lib.sh"
if ! ldd "$BIN/llm-train" 2>/dev/null | grep -q libcublas; then
  skip "NCCL opened at run time" "not a CUDA=1 build"; exit 0
fi
for p in llm-train llm-infer llm-bench llm-profile; do
  check "$p links cuBLAS and not NCCL" bash -c "ldd '$BIN/$p' | grep -q libcublasLt && ! ldd '$BIN/$p' | grep -q libnccl"
done
if [ "$BIN" = "$ROOT/bin" ] && grep -q 'NCCL=1' "$ROOT/build/dist.flags" 2>/dev/null; then
  check "... llm-train names the NCCL library it opens" grep -aq 'libnccl\.so\.[0-9]' "$BIN/llm-train"
fi
# where NCCL is missing: the file llm-train would open hidden under an empty one in a
# private mount namespace (root and unshare(1) needed); the CPU paths train and infer
if ! have_data tinyshakespeare/input.txt; then
  skip "a CUDA build without NCCL" "no $DATA/tinyshakespeare"; echo "1..$_n"; exit 0
fi
cd "$TMP" || exit 1
tiny_data
tiny_model 2
so=$(grep -aom1 'libnccl\.so\.[0-9]*' "$BIN/llm-train")
rp=$(readelf -d "$BIN/llm-train" 2>/dev/null | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\].*/\1/p')
f=""
for d in ${rp//:/ }; do [ -n "$so" ] && [ -e "$d/$so" ] && { f=$(readlink -f "$d/$so"); break; }; done
if [ -z "$f" ] || [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  skip "a CUDA build without NCCL" "needs NCCL in the run path, root and unshare -m"
else
  : >empty.so
  printf 'mount --bind "%s" "%s" || exit 3\n"$@"\n' "$TMP/empty.so" "$f" >hide.sh
  expect_exit "NCCL hidden: llm-train trains on the cpu" 0 \
    unshare -m bash hide.sh llm-train --config m.yaml -o hidden --set train.max_steps=1
  expect_exit "NCCL hidden: llm-infer generates" 0 \
    unshare -m bash hide.sh llm-infer "$M" -p "ab" -n 4 --temperature 0
  expect_exit "NCCL hidden: llm-bench allreduce on the cpu" 0 \
    unshare -m bash hide.sh llm-bench allreduce -b 1K -e 1K -r 1 -w 0
fi
echo "1..$_n"
