#!/bin/bash
# llm-train --precision bf16|fp16 on the CPU: 20 steps from the same init stay within 2e-2
# of fp32 at every step (and are not fp32); cpu and cpu-ref agree; fp16 dynamic loss
# scaling from 2^24: overflows skip the step without touching weights or moments, halve
# the scale and are logged and reported; a short window grows it back; resume is exact
# with the scale state; an fp32 checkpoint resumes under bf16; bad values are refused.
. "$(dirname "$0")/lib.sh"
PY=python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "mixed-precision training" "no $DATA/tinyshakespeare"; exit 0; fi
cd "$TMP" || exit 1
tiny_data 200000
cat >run.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, val: $TMP/val.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 64, max_steps: 20, lr: 0.003, warmup_steps: 2, save_every: 1000,
        eval_batches: 2, seed: 99, threads: 2}
Y
# the step lines with their loss scales, and the events, of metrics files (later win)
scales() { $PY - "$@" <<'PY'
import json, sys
d = {}
for p in sys.argv[1:]:
    for l in open(p):
        j = json.loads(l)
        if 'loss' in j: d[(j['step'], 0)] = '%r %r' % (j['loss'], j.get('loss_scale'))
        elif j.get('event'): d[(j['step'], 1)] = json.dumps(j, sort_keys=True)
for k in sorted(d): print(k[0], d[k])
PY
}
# the loss scale of every step, the skipped count and the events (no losses)
scale_seq() { $PY - "$@" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if 'loss' in j: print(j['step'], j.get('loss_scale'), j['skipped'])
    elif j.get('event'): print(json.dumps(j, sort_keys=True))
PY
}
# norms_close A B TOL: grad_norm of every step within TOL relative (null == null)
norms_close() { $PY - "$@" <<'PY'
import json, sys
def g(p): return [json.loads(l)['grad_norm'] for l in open(p) if '"loss"' in l]
a, b, tol = g(sys.argv[1]), g(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) > 0 and any(x is not None for x in a)
sys.exit(0 if all((x is None) == (y is None) and (x is None or abs(x - y) <= tol * x)
                  for x, y in zip(a, b)) else 1)
PY
}
# deviation A B TOL: every step's loss of B within TOL (relative) of A's, and not all equal
deviation() { $PY - "$@" <<'PY'
import json, sys
def ls(p): return [json.loads(l)['loss'] for l in open(p) if '"loss"' in l]
a, b, tol = ls(sys.argv[1]), ls(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) > 0, (len(a), len(b))
dev = [abs(y - x) / abs(x) for x, y in zip(a, b)]
print("# %s vs %s: %d steps, max relative loss deviation %.3g (step %d), mean %.3g"
      % (sys.argv[2], sys.argv[1], len(a), max(dev), dev.index(max(dev)) + 1, sum(dev) / len(dev)))
sys.exit(0 if max(dev) <= tol and max(dev) > 0 else 1)
PY
}
weights() { $PY - "$1" "$2" <<'PY'
import sys
def data(p):
    b = open(p, 'rb').read(); h = int.from_bytes(b[12:20], 'little')
    return b[(20 + h + 63) // 64 * 64:]
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}

# ---- fp32, bf16, fp16 from the same init ----
for p in fp32 bf16 fp16; do
  expect_exit "$p: 20 steps" 0 llm-train --config run.yaml -o $p --precision $p --metrics $p.jsonl --prom $p.prom
done
check "bf16 within 2e-2 of fp32 at every step, not equal" deviation fp32.jsonl bf16.jsonl 2e-2
check "fp16 within 2e-2 of fp32 at every step, not equal" deviation fp32.jsonl fp16.jsonl 2e-2
check "fp16 step lines carry loss_scale 65536" [ "$(grep -c '"loss_scale":65536}' fp16.jsonl)" = 20 ]
check "fp32 and bf16 step lines carry no loss_scale" [ "$(cat fp32.jsonl bf16.jsonl | grep -c loss_scale)" = 0 ]
check "fp16 prom has the loss scale" grep -qx "llmkit_train_loss_scale 65536" fp16.prom
check "fp32 prom has no loss scale" sh -c '! grep -q loss_scale fp32.prom'
check "checkpoint records precision bf16" sh -c 'head -c 65536 bf16/step-00000020.llmk | grep -aq "precision: bf16"'
check "fp16 checkpoint records the scale state" sh -c 'head -c 65536 fp16/step-00000020.llmk | grep -aq "loss_scale_clean: 20"'

# ---- cpu against cpu-ref (the plain-loop reference kernels) ----
for p in bf16 fp16; do
  expect_exit "$p: cpu-ref 6 steps" 0 llm-train --config run.yaml -o r$p --precision $p --set train.device=cpu-ref --set train.max_steps=6 --metrics r$p.jsonl
  expect_exit "$p: cpu 6 steps" 0 llm-train --config run.yaml -o c$p --precision $p --set train.max_steps=6 --metrics c$p.jsonl
  check "$p: cpu and cpu-ref losses within 1e-4" deviation r$p.jsonl c$p.jsonl 1e-4
done

# ---- fp16 dynamic loss scaling from 2^24 (B*T = 256: d(logits) overflows f16) ----
cat >ls.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 64, max_steps: 12, lr: 0.003, warmup_steps: 2, save_every: 1,
        keep_last: 0, seed: 99, threads: 2, precision: fp16, loss_scale: 16777216,
        loss_scale_window: 3}
Y
expect_exit "fp16 from scale 2^24, window 3" 0 llm-train --config ls.yaml -o ls --metrics ls.jsonl
check "overflows are logged" grep -q "step 1: fp16 gradient overflow, update skipped; loss scale 16777216 -> 8388608" "$TMP/err"
$PY - ls.jsonl <<'PY' && ok "scale halves on each overflow, doubles after 3 clean steps, events match" || notok "loss-scale sequence"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [j for j in lines if 'loss' in j]
events = {j['step']: j for j in lines if j.get('event') == 'loss_scale'}
scale, clean, over, grow, skipped = 2.0 ** 24, 0, 0, 0, 0
assert len(steps) == 12
assert steps[0]['grad_norm'] is None and steps[0]['skipped'] == 1, steps[0]   # step 1 overflows
for j in steps:
    assert j['loss_scale'] == scale, (j, scale)
    if j['skipped'] > skipped:                       # this step was skipped: an overflow
        skipped = j['skipped']
        e = events.pop(j['step'])
        assert (e['from'], e['to'], e['reason']) == (scale, scale / 2, 'overflow'), e
        scale, clean, over = scale / 2, 0, over + 1
    else:
        assert j['grad_norm'] is not None
        clean += 1
        if clean == 3 and scale < 2 ** 24:            # at the cap: no change, no event
            e = events.pop(j['step'])
            assert (e['from'], e['to'], e['reason']) == (scale, min(2 * scale, 2 ** 24), 'grow'), e
            scale, grow = min(2 * scale, 2 ** 24), grow + 1
        clean %= 3
assert not events, events
assert over >= 1 and grow >= 1, (over, grow)
print("# %d overflows, %d growths" % (over, grow))
PY
# AdamW's bias correction counts applied updates, as PyTorch's does behind a gradient
# scaler: the first update after skipped overflow steps moves the weights by about lr
# (Adam's first step: lr * g / |g|), not by the ~0.5 lr of a step count that went on
check "the first update after skipped steps has the bias correction of a first update" "$PY" - <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["TMP"])
from llmkpy import tensors
ev = [json.loads(l) for l in open("ls.jsonl")]
over = {e["step"] for e in ev if e.get("event") == "loss_scale" and e.get("reason") == "overflow"}
steps = {e["step"]: e for e in ev if "loss" in e}
s = min(k for k in steps if k not in over)
A, B = tensors("ls/step-%08d.llmk" % (s - 1)), tensors("ls/step-%08d.llmk" % s)
d = max(max(abs(x - y) for x, y in zip(A[k], B[k])) for k in A if not k.startswith("opt."))
r = d / steps[s]["lr"]
print("# first update at step %d (after %d skipped): largest change %.3g = %.3f lr" % (s, len(over & set(range(s))), d, r))
raise SystemExit(not (s > 1 and 0.9 < r < 1.1))
PY
# a checkpoint's optimizer.t is AdamW's count, the updates applied: step - skipped
check "checkpoints hold AdamW's count as optimizer.t: step - skipped" "$PY" - <<'PY'
import glob, re
n = 0
for p in sorted(glob.glob("ls/step-*.llmk")):
    b = open(p, "rb").read(); h = b[20:20 + int.from_bytes(b[12:20], "little")].decode()
    tr = re.search(r"(?m)^train:\n((?:  .*\n)*)", h).group(1)
    step, skipped = (int(re.search(r"(?m)^  %s: (\d+)$" % k, tr).group(1)) for k in ("step", "skipped"))
    t = int(re.search(r"(?m)^  optimizer:\n(?:    .*\n)*?    t: (\d+)$", tr).group(1))
    assert t == step - skipped, (p, step, skipped, t)
    n += skipped > 0
print("# %d checkpoints after skipped steps" % n)
raise SystemExit(n == 0)
PY
# the initial weights and zero moments: a run whose only step is skipped by the fault hook
LLM_TRAIN_FAULT_NAN=1 llm-train --config ls.yaml -o nan --set train.max_steps=1 -q >/dev/null 2>&1
check "a skipped overflow leaves weights and moments as initialised" weights ls/step-00000001.llmk nan/step-00000001.llmk
differ() { ! weights "$@"; }
check "a step that goes through changes them" differ ls/step-00000012.llmk nan/step-00000001.llmk

# ---- exact resume with the scale state ----
expect_exit "first half (exit_after 6)" 0 llm-train --config ls.yaml -o lr --set train.exit_after=6 --metrics lr1.jsonl
check "checkpoint 6 holds the scale state" sh -c 'head -c 65536 lr/step-00000006.llmk | grep -aq "loss_scale_clean: 1"'
expect_exit "resume auto" 0 llm-train --config ls.yaml -o lr --resume auto --metrics lr2.jsonl
check "resumed losses, scales and events == straight run" diff <(scales ls.jsonl) <(scales lr1.jsonl lr2.jsonl)
check "final weights and moments identical" weights ls/step-00000012.llmk lr/step-00000012.llmk

# ---- an fp32 checkpoint resumes under bf16 (master weights are fp32) ----
expect_exit "fp32 first half" 0 llm-train --config run.yaml -o x --set train.exit_after=10 --metrics x1.jsonl
expect_exit "resume under --precision bf16" 0 llm-train --config run.yaml -o x --resume auto --precision bf16 --metrics x2.jsonl
check "bf16 continuation within 2e-2 of fp32" deviation fp32.jsonl <(cat x1.jsonl x2.jsonl) 2e-2

# ---- refusals ----
expect_exit "--precision fp8 refused (64)" 64 llm-train --config run.yaml --precision fp8
check "--precision fp8 names the key" grep -q "'train.precision' must be one of fp32|bf16|fp16, got 'fp8'" "$TMP/err"
expect_exit "loss_scale 0 refused (64)" 64 llm-train --config run.yaml --set train.loss_scale=0
check "loss_scale 0 names the key" grep -q "'train.loss_scale' must be in \[1, 16777216\], got 0" "$TMP/err"
expect_exit "loss_scale nan refused (64)" 64 llm-train --config run.yaml --set train.loss_scale=nan
expect_exit "loss_scale_window 0 refused (64)" 64 llm-train --config run.yaml --set train.loss_scale_window=0
check "--print-config shows the precision" sh -c 'llm-train --config run.yaml --precision fp16 --print-config | grep -qx "  precision: fp16"'

# ---- data parallel (MPI): 2 ranks x B=2 == 1 rank x B=4 in fp16 from scale 2^24 ----
# (d(logits) = 2^24 / 128 overflows f16 on every rank; the summed gradient is not finite)
no_leak_checks
MPIRUN=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
cat >dp.yaml <<Y
model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 257, max_seq_len: 32}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 2, seq_len: 32, max_steps: 8, lr: 0.003, warmup_steps: 2, save_every: 1000,
        seed: 5, threads: 1, grad_clip: 0.5, precision: fp16, loss_scale: 16777216,
        loss_scale_window: 2}
Y
if ! command -v mpirun >/dev/null; then
  skip "fp16 data parallel" "mpirun not installed"
elif ! "${MPIRUN[@]}" -np 2 llm-train --config dp.yaml -o dprobe --set train.max_steps=1 >/dev/null 2>dprobe.err; then
  if grep -q "this build has no MPI" dprobe.err; then skip "fp16 data parallel" "llm-train built with MPI=0"
  else notok "2 ranks start ($(tail -c 300 dprobe.err))"; fi
else
  expect_exit "fp16, 1 rank x B=4" 0 llm-train --config dp.yaml -o d1 --set train.batch_size=4 --metrics d1.jsonl
  check "1 rank: the scale starts by overflowing" grep -q '"reason":"overflow"' d1.jsonl
  for z in 0 1; do
    expect_exit "fp16, 2 ranks x B=2, zero $z" 0 "${MPIRUN[@]}" -np 2 llm-train --config dp.yaml -o d2z$z --set train.zero=$z --metrics d2z$z.jsonl
    check "zero $z: losses within 1e-4 of 1 rank x B=4" deviation d1.jsonl d2z$z.jsonl 1e-4
    check "zero $z: same loss scale at every step, same events" diff <(scale_seq d1.jsonl) <(scale_seq d2z$z.jsonl)
    check "zero $z: the same true gradient norms (within 1e-4)" norms_close d1.jsonl d2z$z.jsonl 1e-4
  done
fi
# the planner's prediction for mixed precision (fp32 master weights + a 16-bit copy, fp32
# gradients and moments, 16-bit activations) against the backend allocations llm-train
# measures: the planner models the layout exactly (256-byte rounding included)
cat >pm.yaml <<Y
model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 257, max_seq_len: 64}
data: {train: $TMP/train.bin, tokenizer: byte}
train: {batch_size: 4, seq_len: 64, max_steps: 2, lr: 0.001, warmup_steps: 1, save_every: 1000,
        keep_last: 0, seed: 5, threads: 2}
Y
# (and activation recompute: the planner's selective and full against llm-train's)
for pr in fp32:none bf16:none fp16:none fp32:selective fp32:full bf16:full; do
  p=${pr%:*} rc=${pr#*:}
  llm-profile plan --config pm.yaml --device cpu --precision $p --recompute $rc --json >pm$p$rc.json
  LLM_TRAIN_MEMSTAT=1 llm-train --config pm.yaml -o pm$p$rc --precision $p --set train.recompute=$rc -q \
    2>pm$p$rc.err >/dev/null
  $PY - pm$p$rc.json pm$p$rc.err <<'PY' && ok "$p, recompute $rc: planner within 0.1% of the measured allocation peak" || notok "$p $rc: planner vs measured: $(tail -2 pm$p$rc.err)"
import json, re, sys
plan = json.load(open(sys.argv[1]))['bytes']['total']
m = [re.search(r'peak memory (\d+) bytes allocated', l) for l in open(sys.argv[2])]
meas = [float(x.group(1)) for x in m if x][0]
print('# planned %.0f measured %.0f (%+.2f%%)' % (plan, meas, 100 * (plan / meas - 1)))
assert abs(plan / meas - 1) <= 0.001
PY
done
# recompute changes memory, not results: the same losses and final weights as keeping all
for rc in none selective full; do
  expect_exit "recompute $rc: 6 steps" 0 llm-train --config run.yaml -o rc$rc --set train.recompute=$rc \
    --set train.max_steps=6 --metrics rc$rc.jsonl -q
done
for rc in selective full; do
  check "recompute $rc: losses identical to none" diff <(losses rcnone.jsonl) <(losses rc$rc.jsonl)
  llm-shard info --json rcnone/step-00000006.llmk | grep -o '"crc32": *[0-9]*' >crc.none
  llm-shard info --json rc$rc/step-00000006.llmk | grep -o '"crc32": *[0-9]*' >crc.$rc
  check "recompute $rc: final checkpoint tensors identical (crc32 of each)" \
    eval '[ "$(wc -l <crc.none)" -gt 10 ] && cmp -s crc.none crc.'$rc
done
expect_exit "recompute: an unknown mode is refused" 64 llm-train --config run.yaml -o rcbad --set train.recompute=most
echo "1..$_n"
