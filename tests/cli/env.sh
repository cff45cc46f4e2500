#!/bin/bash
# Environment variables are read strictly: a value that is set but not one the variable
# takes is a usage error (exit 64) naming the variable, before any output is written;
# unset or empty means the default.  Every variable the man pages list, by the program
# that reads it.
. "$(dirname "$0")/lib.sh"
if ! have_data tinyshakespeare/input.txt; then skip "environment" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1
tiny_data 20000 2000
tiny_model 2
printf 'hello world\n' >hw.txt
names() { grep -q "$1" "$TMP/err" || { echo "stderr does not name $1: $(head -c 300 "$TMP/err")"; return 1; }; }

# NAME VALUE CMD...: refused with 64 and a message naming NAME; no output file left
refused() {
  local var=$1 val=$2; shift 2
  rm -f out.bin .out.bin.tmp.*
  env "$var=$val" "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ $rc = 64 ] && grep -q "$var '" "$TMP/err" && ! ls -A | grep -q 'out\.bin'; then
    ok "$var='$val': exit 64, named ($(head -1 "$TMP/err" | head -c 120))"
  else
    notok "$var='$val': exit $rc, want 64 naming it: $(head -c 300 "$TMP/err")"
  fi
}
tok=(llm-tokenize --vocab byte -o out.bin hw.txt)
for v in 16M -1 0 " 4096" 4096x 99999999999999999999; do refused LLM_TOKENIZE_WINDOW "$v" "${tok[@]}"; done
for v in x -5 "1e6" 18446744073709551616; do refused LLM_FAULT_WRITE_LIMIT "$v" "${tok[@]}"; done
expect_exit "LLM_TOKENIZE_WINDOW empty: the default" 0 env LLM_TOKENIZE_WINDOW= "${tok[@]}"
expect_exit "LLM_TOKENIZE_WINDOW=1: taken" 0 env LLM_TOKENIZE_WINDOW=1 "${tok[@]}"
expect_exit "LLM_FAULT_WRITE_LIMIT=5: the output fails as on a full disk (74)" 74 env LLM_FAULT_WRITE_LIMIT=5 "${tok[@]}"
# quantize and shard write through the same output module
refused LLM_FAULT_WRITE_LIMIT 5k llm-quantize "$M" out.bin --type q8_0
# llm-shard makes the folder of split's PREFIX and export's safetensors directory: a
# refused value leaves neither behind
refused LLM_FAULT_WRITE_LIMIT 5k llm-shard split --tp 2 "$M" -o sp/part
check "llm-shard split: no folder left after the refusal" [ ! -e sp ]
refused LLM_FAULT_WRITE_LIMIT 5k llm-shard export --to safetensors "$M" -o hf
check "llm-shard export: no directory left after the refusal" [ ! -e hf ]
rm -rf sp hf

train=(llm-train --config m.yaml -o t2 --set train.max_steps=1 -q)
refused LLM_TRAIN_FAULT_NAN three "${train[@]}"
refused LLM_TRAIN_FAULT_NAN -1 "${train[@]}"
refused LLM_TRAIN_FAULT step "${train[@]}"
refused LLM_TRAIN_FAULT step:-1 "${train[@]}"
refused LLM_TRAIN_FAULT update:3 "${train[@]}"
refused LLM_TRAIN_MEMSTAT yes "${train[@]}"
refused LLM_CPU_GEMM openblas "${train[@]}"
refused LLM_CUDA_FLASH off "${train[@]}"
refused LLM_CUDA_TF32 true "${train[@]}"
refused LLM_FAULT_WRITE_LIMIT 1M "${train[@]}" --metrics fw.jsonl
check "LLM_FAULT_WRITE_LIMIT refused before step 1 (no metrics)" [ ! -s fw.jsonl ]
check "no run directory after the refusals" [ ! -e t2 ]
expect_exit "LLM_CPU_GEMM=blas: taken" 0 env LLM_CPU_GEMM=blas "${train[@]}" -o t3
expect_exit "LLM_TRAIN_MEMSTAT=1: taken" 0 env LLM_TRAIN_MEMSTAT=1 "${train[@]}" -o t4
check "LLM_TRAIN_MEMSTAT=1: the peak memory line" grep -q "peak memory" "$TMP/err"

inf=(llm-infer "$M" -p hello -n 2 --seed 1 --device cpu)
refused LLM_Q4_REPACK 2 llm-infer "$M" -p hello -n 2 --seed 1
# whatever the backend: cpu-ref (and cuda) never repack, but the value is still checked
refused LLM_Q4_REPACK 2 llm-infer "$M" -p hello -n 2 --seed 1 --device cpu-ref
refused LLM_CUDA_GRAPHS no "${inf[@]}"
refused LLM_CPU_GEMM omp2 "${inf[@]}"
expect_exit "LLM_CUDA_GRAPHS=0 on cpu: taken" 0 env LLM_CUDA_GRAPHS=0 "${inf[@]}"
refused LLM_CPU_GEMM x llm-bench train --config m.yaml -r 1 -w 0
refused LLM_CPU_GEMM x llm-profile "$M" -d cpu -b 1 -t 8
echo "1..$_n"
