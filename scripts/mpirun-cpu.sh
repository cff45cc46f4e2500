#!/bin/bash
# Data-parallel CPU training on one machine with Open MPI: NP ranks x THREADS threads.
#   scripts/mpirun-cpu.sh NP THREADS --config run.yaml -o runs/a [llm-train options]
# A signal to mpirun (Ctrl-C, SIGTERM) reaches every rank: one checkpoint, exit 0.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP THREADS llm-train-options..." >&2; exit 64; }
NP=$1 THREADS=$2; shift 2
ARGS=(--oversubscribe --bind-to none -x OMP_NUM_THREADS="$THREADS")
[ "$(id -u)" = 0 ] && ARGS+=(--allow-run-as-root)
exec mpirun "${ARGS[@]}" -np "$NP" llm-train --set train.device=cpu --set train.threads="$THREADS" --resume auto "$@"
