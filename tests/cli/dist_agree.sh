#!/bin/bash
# The ranks' config agreement under mpirun (CPU, MPI), ranks given their own options
# (MPMD: `mpirun -np 1 A : -np 1 B`): a refusal every rank reaches together is said once,
# by rank 0, naming the key with rank 0's value and the other rank's; one that a rank
# alone sees (a file missing on its node) is said by that rank.  data.train is compared
# by what it names: the same data under node-specific paths runs, other data under the
# same path (a relative path in another working directory) is refused; output.dir is
# rank 0's alone.
. "$(dirname "$0")/lib.sh"
mpi_suite "config agreement" || exit 0
cd "$TMP" || exit 1
tiny_data 100000 0
mkdir -p n1 n2 other
cp train.bin n1/train.bin; cp train.bin n2/train.bin
cp val.bin other/train.bin     # other data under the same base name
cat >run.yaml <<Y
model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 257, max_seq_len: 16}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 2, seq_len: 16, max_steps: 2, lr: 0.003, warmup_steps: 1, save_every: 1000,
        keep_last: 0, seed: 5, threads: 1}
Y
if ! "${MPIRUN[@]}" -np 2 llm-train --config run.yaml -o probe >/dev/null 2>probe.err; then
  if grep -q "this build has no MPI" probe.err; then skip "config agreement" "llm-train built with MPI=0"
  else notok "2 ranks start ($(tail -c 300 probe.err))"; fi
  echo "1..$_n"; exit 0
fi
# mpmd "A" "B" [COMMON...]: rank 0 with the words of A, rank 1 with those of B (each may
# begin with "-wdir DIR", mpirun's working directory for that rank)
mpmd() { local a=($1) b=($2) wa=() wb=(); shift 2
  [ "${a[0]:-}" = -wdir ] && { wa=(-wdir "${a[1]}"); a=("${a[@]:2}"); }
  [ "${b[0]:-}" = -wdir ] && { wb=(-wdir "${b[1]}"); b=("${b[@]:2}"); }
  "${MPIRUN[@]}" -np 1 "${wa[@]}" llm-train --config "$TMP/run.yaml" "$@" "${a[@]}" \
    : -np 1 "${wb[@]}" llm-train --config "$TMP/run.yaml" "$@" "${b[@]}"; }
lines() { grep -c "$1" "$TMP/err"; }

# ---- one voice for what every rank finds ----
expect_exit "3 ranks, rank 0 with another train.lr: refused (65)" 65 "${MPIRUN[@]}" \
  -np 1 llm-train --config run.yaml -o lr --set train.lr=0.001 : -np 2 llm-train --config run.yaml -o lr
check "... said once, not once per rank ($(lines 'different configs') lines)" [ "$(lines 'different configs')" = 1 ]
check "... naming the key, rank 0's value and the first other rank's" \
  grep -q "different configs: train.lr (0.001 on rank 0, 0.003 on rank 1) differs" "$TMP/err"
check "... nothing written" [ ! -e lr ]
expect_exit "2 ranks, train.total_batch_tokens no multiple of ranks x B x T: refused (65)" 65 \
  "${MPIRUN[@]}" -np 2 llm-train --config run.yaml -o tb --set train.total_batch_tokens=96
check "... said once ($(lines 'must be a multiple') lines)" [ "$(lines 'must be a multiple')" = 1 ]

# ---- data.train by what it names ----
expect_exit "the same data under node-specific paths: runs" 0 mpmd \
  "--set data.train=$TMP/n1/train.bin" "--set data.train=$TMP/n2/train.bin" -o nd --metrics nd.jsonl
check "... both steps" [ "$(grep -c '"loss"' nd.jsonl 2>/dev/null)" = 2 ]
expect_exit "... as globs: runs" 0 mpmd "--set data.train=$TMP/n1/*.bin" \
  "--set data.train=$TMP/n2/tr*.bin" -o ng
expect_exit "other data: refused (65)" 65 mpmd "--set data.train=$TMP/n1/train.bin" \
  "--set data.train=$TMP/other/train.bin" -o od
check "... once, naming the key and both paths" grep -q "different configs: data.train ($TMP/n1/train.bin on rank 0, $TMP/other/train.bin on rank 1: not the same data) differs" "$TMP/err"
check "... said once ($(lines 'different configs') lines)" [ "$(lines 'different configs')" = 1 ]
expect_exit "other data under the same (relative) path: refused (65)" 65 mpmd \
  "-wdir $TMP/n1" "-wdir $TMP/other" --set data.train=train.bin -o "$TMP/rel"
check "... saying so" grep -q "different configs: data.train (train.bin on rank 0 and on rank 1: not the same data) differs" "$TMP/err"
expect_exit "the same data under the same relative path elsewhere: runs" 0 mpmd \
  "-wdir $TMP/n1" "-wdir $TMP/n2" --set data.train=train.bin -o "$TMP/rel2"

# ---- a refusal one rank alone sees: that rank says why ----
expect_exit "data.train missing on rank 1's node: refused (66)" 66 mpmd "" \
  "--set data.train=$TMP/n3/train.bin" -o miss
check "... rank 1 says why" grep -q "rank 1 of 2: data.train: cannot open '$TMP/n3/train.bin'" "$TMP/err"
check "... once ($(lines 'cannot open') lines)" [ "$(lines 'cannot open')" = 1 ]
check "... rank 0 says which rank" grep -q "rank 1 of 2 cannot read what its data.train names (rank 1 says why)" "$TMP/err"
check "... nothing written" [ ! -e miss ]

# ---- output.dir is rank 0's ----
expect_exit "another output.dir on rank 1: runs" 0 mpmd "-o $TMP/o0" "-o $TMP/o1"
check "... rank 0 wrote the checkpoint" [ -f o0/step-00000002.llmk ]
check "... none in rank 1's" [ -z "$(ls o1 2>/dev/null)" ]
echo "1..$_n"
