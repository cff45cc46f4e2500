#!/bin/bash
# llm-train under Open MPI's mpirun with the stop signals turned into SIGUSR1, which
# mpirun hands to every rank: each rank then finishes its step and they write one
# checkpoint together (exit 0).  mpirun itself answers SIGTERM and SIGINT by killing
# the ranks a second later (odls_base_sigkill_timeout), mid-step, without a checkpoint.
#   scripts/mpirun-train.sh NP [mpirun options --] llm-train-options...
# (scripts/mpirun-cpu.sh and mpirun-gpu.sh call it.)  Ctrl-C, SIGTERM (kill, a batch
# system's time limit) or SIGINT to this script: every rank checkpoints and stops.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NP [mpirun-options --] llm-train-options..." >&2; exit 64; }
NP=$1; shift
MPI=()
if printf '%s\n' "$@" | grep -qx -- --; then   # mpirun's options, up to --
  while [ "$1" != -- ]; do MPI+=("$1"); shift; done
  shift
fi
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
# mpirun in a process group of its own (job control), so that the terminal's Ctrl-C
# reaches only this script, which forwards it as SIGUSR1
set -m
mpirun "${MPI[@]}" -np "$NP" llm-train --resume auto "$@" &
pid=$!
stop() { kill -USR1 "$pid" 2>/dev/null || true; }
trap stop TERM INT HUP
rc=0
while :; do
  wait "$pid" && { rc=0; break; } || rc=$?
  kill -0 "$pid" 2>/dev/null || break   # ended (rc is its status), not a trapped signal
done
exit "$rc"
