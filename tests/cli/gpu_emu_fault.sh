#!/bin/bash
# llm-train on a device that fails during the run, on the emulated CUDA device (make
# CUDA=emu; under make check the sanitized one): LLM_EMU_FAULT=launch:N:KERNEL
# (tests/emu/include/cuda_runtime.h) makes the N-th run of a kernel fault as an illegal
# memory access does on a GPU, asynchronously, leaving the context in a sticky error that
# every later call reports.  A fault in the update of a step (lc_adamw*: one launch a
# step) must end the run with 69 (EX_UNAVAILABLE) and a message that names the device's
# error, saves nothing (neither the failed step nor "the last complete step", which the
# failed device can no longer give back: the fault may lie in the update before) and
# names the checkpoint on disk to resume from; that checkpoint stays byte for byte what
# a clean run wrote, and resuming from it ends where the clean run ends.
. "$(dirname "$0")/lib.sh"
if ! have_data tinyshakespeare/input.txt; then skip "device failure on the emulated CUDA device" "no $DATA/tinyshakespeare"; exit 0; fi
E=$ROOT/build/emu/bin
[ "${LLM_SAN:-0}" = 1 ] && E=$ROOT/build/san/emu/bin
if [ ! -x "$E/llm-train" ]; then
  skip "device failure on the emulated CUDA device" "not built (make CUDA=emu all; make test builds it unless EMU=0)"; exit 0
fi
cd "$TMP" || exit 1
tiny_data 60000
tiny_config 4
train() { "$E/llm-train" --config ../m.yaml --set train.device=cuda --set train.batch_size=2 \
  --set train.seq_len=32 --set train.save_every=2 -o run "$@"; }
mkdir a b c
(cd a && train >out 2>err)
rc=$?
check "a clean run of 4 steps on cuda (emu) exits 0 (rc=$rc)" test $rc = 0
# the third update of the run (step 3's) faults: step 2's checkpoint is on disk
(cd b && LLM_EMU_FAULT=launch:3:lc_adamw train >out 2>err)
rc=$?
check "a device fault in step 3's update: exit 69 (rc=$rc: $(tail -c 300 b/err))" test $rc = 69
check "... the emulated kernel faulted" grep -q '^emu: kernel lc_adamw.*: injected fault' b/err
check "... the error names the device's failure and the step" grep -q \
  "^llm-train: device 'cuda' failed by the end of step 3: CUDA device 0: an illegal memory access was encountered (a sticky error" b/err
check "... nothing is saved, and it names the checkpoint to resume from" grep -q \
  "; nothing is saved: resume from the last checkpoint on disk, 'run/step-00000002.llmk' (step 2)\$" b/err
check "... no rescue save attempted" bash -c "! grep -q 'last complete one' b/err"
check "... the run directory holds step 2's checkpoint alone (no rescue, no later one, no temporary file)" \
  test "$(ls -A b/run | tr '\n' ' ')" = "step-00000002.llmk "
check "... step 2's checkpoint is byte for byte the clean run's" cmp -s a/run/step-00000002.llmk b/run/step-00000002.llmk
(cd b && train --resume auto >out2 2>err2)
rc=$?
check "resuming from it exits 0 (rc=$rc: $(tail -c 300 b/err2))" test $rc = 0
check "... and ends on the clean run's step 4, byte for byte" cmp -s a/run/step-00000004.llmk b/run/step-00000004.llmk
# the second update faults, before the first checkpoint: nothing of the run is on disk
(cd c && LLM_EMU_FAULT=launch:2:lc_adamw train >out 2>err)
rc=$?
check "a device fault in step 2's update, before any checkpoint: exit 69 (rc=$rc)" test $rc = 69
check "... the error says that no checkpoint of the run is on disk" grep -q \
  "^llm-train: device 'cuda' failed by the end of step 2: .*; nothing is saved, and no checkpoint of this run is on disk: train again from the start\$" c/err
check "... and none is written" bash -c "! ls c/run/*.llmk 2>/dev/null | grep -q ."
echo "1..$_n"
