#!/bin/bash
# One rank per GPU on one machine (NCCL collectives; MPI only starts the ranks and
# carries NCCL's id).  scripts/mpirun-gpu.sh NGPU --config run.yaml -o runs/a
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NGPU llm-train-options..." >&2; exit 64; }
N=$1; shift
ARGS=(--bind-to none)
[ "$(id -u)" = 0 ] && ARGS+=(--allow-run-as-root)
exec mpirun "${ARGS[@]}" -np "$N" llm-train --set train.device=cuda --resume auto "$@"
