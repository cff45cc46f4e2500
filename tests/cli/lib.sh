# Sourced by tests/cli/*.sh.  Prints TAP lines; tests/run.sh counts them.
# Programs come from $BIN (on PATH); shared data from $LLM_DATA (default ../shared/data).
set -u
ROOT=${LLM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=${BIN:-$ROOT/bin}
export PATH="$BIN:$PATH"
DATA=${LLM_DATA:-$ROOT/../shared/data}
TMP=$(mktemp -d /tmp/llmkit-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# readers the Python checks share: `sys.path.insert(0, os.environ["TMP"])`, then
# `from llmkpy import tensors, gguf_kv`
export TMP
cat >"$TMP/llmkpy.py" <<'PY'
import array, re, struct

def tensors(p):
    """The f32 tensors of a .llmk file: name -> array('f')."""
    b = open(p, 'rb').read(); h = int.from_bytes(b[12:20], 'little')
    head = b[20:20 + h].decode(); base = (20 + h + 63) // 64 * 64
    out = {}
    for m in re.finditer(r'name: (\S+)\n\s*dtype: f32\n(?:.*\n)*?\s*offset: (\d+)\n\s*nbytes: (\d+)', head):
        o, n = int(m.group(2)), int(m.group(3))
        out[m.group(1)] = array.array('f', b[base + o:base + o + n])
    return out

def gguf_kv(path):
    """A GGUF file's metadata (key -> value) and tensor shapes (name -> ne)."""
    b = open(path, "rb").read(); at = [8]
    def rd(f):
        v = struct.unpack_from("<" + f, b, at[0])[0]; at[0] += struct.calcsize("<" + f); return v
    def s():
        n = rd("Q"); v = b[at[0]:at[0] + n].decode(); at[0] += n; return v
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = rd("I"); n = rd("Q"); return [val(et) for _ in range(n)]
        return rd({4: "I", 5: "i", 6: "f"}[t])
    nt, nkv = rd("Q"), rd("Q")
    kv = {}
    for _ in range(nkv):
        k = s(); kv[k] = val(rd("I"))
    ne = {}
    for _ in range(nt):
        name = s(); ne[name] = [rd("Q") for _ in range(rd("I"))]; rd("I"); rd("Q")
    return kv, ne
PY
_n=0
ok()    { _n=$((_n+1)); echo "ok $_n - $*"; }
notok() { _n=$((_n+1)); echo "not ok $_n - $*"; }
# check NAME CMD...: passes when CMD exits 0
check() { local name=$1; shift; if "$@"; then ok "$name"; else notok "$name"; fi; }
# expect_exit NAME CODE CMD...: passes when CMD exits CODE; stderr kept in $TMP/err
expect_exit() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local got=$?
  if [ "$got" = "$want" ]; then ok "$name"; else notok "$name (exit $got, want $want: $(head -c 300 "$TMP/err"))"; fi
}
# skip NAME REASON
skip()  { _n=$((_n+1)); echo "ok $_n - $1 # SKIP $2"; }
have_data() { [ -f "$DATA/$1" ]; }
# Open MPI allocates at MPI_Init and never frees it, in plugins it unloads at exit, so
# LeakSanitizer (make check) reports leaks its suppressions cannot name: scripts that
# mpirun our programs turn the leak report off for one command (no_leak_checks CMD...)
# or for the rest of the script (no_leak_checks); single-process tests keep it.
no_leak_checks() {
  local o="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  if [ $# = 0 ]; then export ASAN_OPTIONS=$o; else ASAN_OPTIONS=$o "$@"; fi
}

# mpi_suite WHAT: the start of a script whose runs are all under mpirun (CPU, MPI, on
# Tiny Shakespeare): no leak report (above), idle OpenMP threads sleep, MPIRUN set; 1
# after a skip (mpirun or the data missing), for `mpi_suite WHAT || exit 0`.
mpi_suite() {
  no_leak_checks
  PY=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)  # the pyenv shim is slow to start
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
  if ! command -v mpirun >/dev/null; then skip "$1" "mpirun not installed"; return 1; fi
  if ! have_data tinyshakespeare/input.txt; then skip "$1" "no $DATA/tinyshakespeare"; return 1; fi
  MPIRUN=(mpirun --oversubscribe --mca btl self,vader)
  [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
}

# launch_limits NAME [--all-launched SRCDIR] LOG...: the emulated launches in LOG
# (LLM_EMU_LAUNCH_LOG) against what ptxas made of each kernel (tests/gpu/launch_limits.py),
# built by `make cuda-res` in its own directory; skipped without nvcc.  The table goes to
# $TMP/limits.txt.
launch_limits() {
  local name=$1 opt=(); shift
  [ "${1:-}" = --all-launched ] && { opt=(--all-launched "$2"); shift 2; }
  if [ -z "$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)" ]; then
    skip "$name" "no nvcc"; return 0
  fi
  if ! make -s -C "$ROOT" CUDA=1 B=build/cuda-res/b cuda-res >"$TMP/res.log" 2>&1; then
    notok "$name: make cuda-res failed: $(tail -c 300 "$TMP/res.log")"; return 0
  fi
  python3 "$ROOT/tests/gpu/launch_limits.py" "${opt[@]}" "$ROOT/build/cuda-res" "$@" >"$TMP/limits.txt" 2>&1
  local rc=$? last
  last=$(tail -1 "$TMP/limits.txt")
  if [ $rc = 0 ]; then ok "$name: $last"
  else notok "$name: rc=$rc $(grep -m5 '^FAIL' "$TMP/limits.txt" | tr '\n' ' ')"; fi
}

# tiny_data [BYTES] [VAL] [NAME:N ...]: byte-level token files (llm.c format, version 1) of
# the first BYTES bytes of Tiny Shakespeare (0 or absent: all) in the current directory:
# val.bin = the first VAL tokens (0 or absent: a tenth), train.bin = the rest, and a file
# NAME of the first N tokens for each NAME:N.
tiny_data() {
  "${PY:-python3}" - "$DATA/tinyshakespeare/input.txt" "$@" <<'PY'
import struct, sys
a = sys.argv[2:] + ["0", "0"]
b = open(sys.argv[1], 'rb').read()
if int(a[0]): b = b[:int(a[0])]
def w(p, t):
    with open(p, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, len(t), *([0] * 253)))
        f.write(struct.pack('<%dH' % len(t), *t))
n = int(a[1]) or len(b) // 10
w('val.bin', b[:n]); w('train.bin', b[n:])
for x in sys.argv[4:]:
    name, k = x.split(':'); w(name, b[:int(k)])
PY
}

# tiny_config STEPS [N_HEAD]: tiny_model's config, m.yaml, alone (llm-train --set changes it)
tiny_config() {
  cat >m.yaml <<Y
model: {n_layer: 2, n_head: ${2:-2}, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, val: $TMP/val.bin, tokenizer: byte}
train: {batch_size: 8, seq_len: 64, max_steps: $1, lr: 0.004, warmup_steps: 2, save_every: 100000, seed: 7, threads: 2}
Y
}

# tiny_model STEPS [N_HEAD]: trains a 2-layer, 64-wide byte model on the tiny_data files
# (config m.yaml, run directory run/) and sets M to its last checkpoint; a failed run
# ends the test script.
tiny_model() {
  tiny_config "$@"
  if ! llm-train --config m.yaml -o run >/dev/null 2>err; then
    notok "training a model for the tests: $(tail -c 300 err)"; echo "1..$_n"; exit 1
  fi
  M=$(ls run/*.llmk | sort | tail -1)
}

# tiny_tokmodel: tokenizes 20000 bytes of Tiny Shakespeare with llm-tokenize and trains a
# 2-layer, 32-wide model for 2 steps in $TMP/run; sets M; returns llm-train's status
# (its stderr in $TMP/err).
tiny_tokmodel() {
  head -c 20000 "$DATA/tinyshakespeare/input.txt" >"$TMP/in.txt"
  llm-tokenize --vocab byte -o "$TMP/tok.bin" "$TMP/in.txt" >/dev/null 2>&1
  cat >"$TMP/train.yaml" <<Y
model: {arch: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/tok.bin, tokenizer: byte}
train: {batch_size: 2, seq_len: 16, max_steps: 2, warmup_steps: 1, threads: 1}
Y
  llm-train --config "$TMP/train.yaml" -o "$TMP/run" >/dev/null 2>"$TMP/err" || return
  M=$(ls "$TMP"/run/*.llmk | tail -1)
}

# hedit SRC DST PATTERN REPLACEMENT: a copy of the .llmk file SRC with its YAML header
# edited (Python re.sub, first match, which must change something) and the data moved to
# the new data start, so the tensors' checksums still hold
hedit() { "${PY:-python3}" - "$@" <<'PY'
import re, struct, sys
src, dst, pat, rep = sys.argv[1:5]
d = open(src, 'rb').read()
H = struct.unpack('<Q', d[12:20])[0]
hdr = d[20:20 + H].decode()
new = re.sub(pat, rep, hdr, count=1).encode()
assert new != hdr.encode(), pat
D0, D1 = (20 + H + 63) // 64 * 64, (20 + len(new) + 63) // 64 * 64
out = d[:12] + struct.pack('<Q', len(new)) + new
open(dst, 'wb').write(out + b'\0' * (D1 - len(out)) + d[D0:])
PY
}

# losses FILE...: "step loss" lines of the step records of llm-train metrics files (later
# files win), the loss as Python's repr (exact)
losses() { "${PY:-python3}" - "$@" <<'PY'
import json, sys
d = {}
for p in sys.argv[1:]:
    for l in open(p):
        j = json.loads(l)
        if 'loss' in j: d[j['step']] = repr(j['loss'])
for s in sorted(d): print(s, d[s])
PY
}

# (distributed runs: tests/cli/dist.sh, dist_emu.sh)
# close A B [TOL]: same steps, losses within TOL relative (default 1e-5)
close() { "${PY:-python3}" - "$@" <<'PY'
import json, sys
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
def L(p):
    d = {}
    for l in open(p):
        j = json.loads(l)
        if 'loss' in j: d[j['step']] = j['loss']
    return d
a, b = L(sys.argv[1]), L(sys.argv[2])
if not a or sorted(a) != sorted(b): print('# steps differ', sorted(a), sorted(b)); sys.exit(1)
w = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print('# worst relative loss difference %.1e' % w)
sys.exit(w > tol)
PY
}
# wclose A B: the tensors of two checkpoints agree: weights within 1e-5 absolute (they are
# O(0.01..1)); AdamW moments within 1e-5 of each tensor's largest value.  Not relative per
# weight: the attention key bias has a zero gradient up to rounding, which AdamW scales to
# full-size steps, so its few elements differ by ~1e-6 between summation orders.
wclose() { "${PY:-python3}" - "$1" "$2" <<'PY'
import os, sys
sys.path.insert(0, os.environ["TMP"])
from llmkpy import tensors
A, B = tensors(sys.argv[1]), tensors(sys.argv[2])
if not A or A.keys() != B.keys(): print('# tensor sets differ', len(A), len(B)); sys.exit(1)
ww = wm = 0
for k in A:
    d = max(abs(x - y) for x, y in zip(A[k], B[k]))
    if k.startswith('opt.'): wm = max(wm, d / max(max(abs(x) for x in A[k]), 1e-30))
    else: ww = max(ww, d)
print('# %d tensors: weights differ by %.1e at most, moments by %.1e of their max' % (len(A), ww, wm))
sys.exit(ww > 1e-5 or wm > 1e-5)
PY
}
# rank PID of a running job started from this shell: pid_of JOB_PID RANK (the job is a
# subshell running mpirun running the ranks, or ranks started with RANK or SLURM_PROCID
# set: walk its descendants)
pid_of() { local q=("$1") p c
  while [ ${#q[@]} -gt 0 ]; do p=${q[0]}; q=("${q[@]:1}")
    for c in $(pgrep -P "$p"); do
      tr '\0' '\n' </proc/$c/environ 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|RANK|SLURM_PROCID)=$2" && { echo "$c"; return; }
      q+=("$c"); done; done; }
# envrun N INIT CMD...: N ranks of CMD started without MPI, as torchrun or srun would
# (RANK, WORLD_SIZE, LOCAL_RANK in the environment; NCCL's id handed on by --dist-init
# INIT, appended to CMD).  As mpirun does, the others are killed when rank 0 fails; the
# exit status is rank 0's, else the first other rank's that is not 0.
envrun() { local n=$1 init=$2 r p x rc pids=(); shift 2
  for ((r = 0; r < n; r++)); do
    env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r "$@" --dist-init "$init" & pids+=($!)
  done
  wait "${pids[0]}"; rc=$?
  [ "$rc" != 0 ] && kill -9 "${pids[@]:1}" 2>/dev/null
  for p in "${pids[@]:1}"; do wait "$p"; x=$?; [ "$rc" = 0 ] && rc=$x; done
  return "$rc"
}
# wait_steps FILE N: until FILE has N step lines (at most 60 s)
wait_steps() { for _ in $(seq 600); do [ -f "$1" ] && [ "$(grep -c '"loss"' "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }
# sigterm_rank0 JOB DIR METRICS SHARD LABEL: SIGTERM to rank 0 of the running job JOB
# (training into DIR, logging METRICS) once it logged 3 steps; every rank must stop at the
# same step: exit 0, one checkpoint in DIR, at the last logged step, that SHARD (an
# llm-shard) verifies.  LABEL starts the first check's name.
sigterm_rank0() { local job=$1 dir=$2 met=$3 shard=$4 label=$5 r0 rc n last step
  if wait_steps "$met" 3 && r0=$(pid_of "$job" 0) && [ -n "$r0" ]; then
    kill -TERM "$r0"; wait "$job"; rc=$?
    check "${label}SIGTERM to rank 0: exit 0 (rc $rc)" [ "$rc" = 0 ]
    n=$(ls "$dir" | wc -l); last=$(ls "$dir" | tail -1)
    step=$(grep '"loss"' "$met" | tail -1 | sed 's/.*"step": *\([0-9]*\).*/\1/')
    check "... one checkpoint ($n)" [ "$n" = 1 ]
    check "... at the last logged step ($last, step $step)" [ "$last" = "$(printf 'step-%08d.llmk' "$step")" ]
    check "... the checkpoint verifies" "$shard" verify -q "$dir/$last"
  else
    kill "$job" 2>/dev/null; wait "$job"; notok "${label}SIGTERM test: run did not start ($(tail -c 300 "$dir.err"))"
  fi
}
