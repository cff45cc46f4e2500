#!/bin/bash
# One rank per GPU on one machine (NCCL collectives; MPI only starts the ranks and
# carries NCCL's id).  scripts/mpirun-gpu.sh NGPU --config run.yaml -o runs/a
# Ctrl-C or SIGTERM to this script reaches every rank (as SIGUSR1, mpirun-train.sh):
# one checkpoint, exit 0.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NGPU llm-train-options..." >&2; exit 64; }
N=$1; shift
exec "$(dirname "$0")/mpirun-train.sh" "$N" --bind-to none -- --set train.device=cuda "$@"
