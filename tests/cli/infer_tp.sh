#!/bin/bash
# llm-infer tensor parallel: shards of llm-shard split --tp 2 run under mpirun -np 2 give
# the unsharded model's greedy text, --eval nll (1e-5) and JSONL batch; wrong launches
# are refused with a clear message.
. "$(dirname "$0")/lib.sh"
no_leak_checks   # for the rest of this script: every run here is under mpirun (lib.sh)
PY=python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! command -v mpirun >/dev/null; then skip "tensor-parallel inference" "mpirun missing"; echo "1..$_n"; exit 0; fi
if ! have_data tinyshakespeare/input.txt; then skip "tensor-parallel inference" "no $DATA/tinyshakespeare"; echo "1..$_n"; exit 0; fi
cd "$TMP" || exit 1
MPI="mpirun --allow-run-as-root --oversubscribe -np"

tiny_data 200000 0 ev.bin:3000
tiny_model 30 4
llm-shard split --tp 2 "$M" -o tp >/dev/null 2>err
check "split --tp 2" [ -f tp-tp0-pp0.llmk ] 
# MPI support built in?  (a build without it refuses several ranks)
if ! $MPI 2 llm-infer --shards tp -p a -n 1 >/dev/null 2>probe; then
  if grep -qi "mpi" probe; then skip "tensor-parallel inference" "no MPI support built in: $(head -c 200 probe)"; echo "1..$_n"; exit 0; fi
fi

llm-infer "$M" -p "ROMEO:" -n 40 --temperature 0 >g1 2>/dev/null
$MPI 2 llm-infer --shards tp -p "ROMEO:" -n 40 --temperature 0 >g2 2>err
check "TP=2 greedy text == unsharded" cmp -s g1 g2
$MPI 2 llm-infer "tp-tp{rank}-pp0.llmk" -p "ROMEO:" -n 40 --temperature 0 >g3 2>/dev/null
check "MODEL with {rank} == --shards" cmp -s g1 g3
llm-infer "$M" -p "KING" -n 40 --seed 9 --temperature 0.9 --top-k 20 >s1 2>/dev/null
$MPI 2 llm-infer --shards tp -p "KING" -n 40 --seed 9 --temperature 0.9 --top-k 20 >s2 2>/dev/null
check "TP=2 seeded sampling == unsharded" cmp -s s1 s2

llm-infer "$M" --eval ev.bin --ctx 64 --stride 32 >e1 2>/dev/null
$MPI 2 llm-infer --shards tp --eval ev.bin --ctx 64 --stride 32 >e2 2>/dev/null
check "--eval nll equal to 1e-5" $PY - e1 e2 <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"], (a, b)
assert abs(a["nll"] - b["nll"]) <= 1e-5 * abs(a["nll"]), (a["nll"], b["nll"])
PY

cat >req.jsonl <<'J'
{"id": "a", "prompt": "First Citizen:", "max_tokens": 20, "temperature": 0}
{"id": "b", "prompt": "To be, or not", "max_tokens": 25, "temperature": 0.8, "seed": 3}
{"id": "c", "prompt": "", "max_tokens": 5}
{"id": "d", "prompt": "O", "max_tokens": 30, "temperature": 0}
J
strip() { $PY -c "import json,sys
for l in sys.stdin:
    o = json.loads(l); print(json.dumps({k: o.get(k) for k in ('id', 'text', 'finish_reason', 'error')}, sort_keys=True))" | sort; }
llm-infer "$M" --jsonl --batch 3 --seed 5 <req.jsonl 2>/dev/null | strip >j1
$MPI 2 llm-infer --shards tp --jsonl --batch 3 --seed 5 <req.jsonl 2>/dev/null | strip >j2
check "JSONL batch of 4 equal" sh -c '[ "$(wc -l <j1)" = 4 ] && cmp -s j1 j2'

expect_exit "one process with a TP shard: 64" 64 llm-infer tp-tp0-pp0.llmk -p a -n 1
check "... says to use mpirun" grep -q "mpirun -np 2" err
expect_exit "whole model under 2 ranks: 64" 64 $MPI 2 llm-infer "$M" -p a -n 1
check "... says to use the shards" grep -q "shards" err
llm-shard split --tp 1 --pp 2 "$M" -o pp >/dev/null 2>&1
expect_exit "pipeline-parallel shard refused: 65" 65 llm-infer pp-tp0-pp0.llmk -p a -n 1
check "... names pipeline parallel" grep -q "pipeline-parallel" err
expect_exit "missing shard on one rank: 66" 66 $MPI 2 llm-infer --shards nope -p a -n 1
expect_exit "MODEL and --shards together: 64" 64 llm-infer "$M" --shards tp -p a
echo "1..$_n"
