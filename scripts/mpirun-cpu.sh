#!/bin/bash
# Data-parallel CPU training on one machine with Open MPI: NP ranks x THREADS threads.
#   scripts/mpirun-cpu.sh NP THREADS --config run.yaml -o runs/a [llm-train options]
# Ctrl-C or SIGTERM to this script reaches every rank (as SIGUSR1, mpirun-train.sh):
# one checkpoint, exit 0.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP THREADS llm-train-options..." >&2; exit 64; }
NP=$1 THREADS=$2; shift 2
exec "$(dirname "$0")/mpirun-train.sh" "$NP" --oversubscribe --bind-to none \
  -x OMP_NUM_THREADS="$THREADS" -- --set train.device=cpu --set train.threads="$THREADS" "$@"
