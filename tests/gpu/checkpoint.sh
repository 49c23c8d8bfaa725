#!/usr/bin/env bash
# A checkpoint saved on the GPU resumes on the CPU: 3 of 5 steps on the GPU (tp 2, two ranks on
# the one GPU), the last 2 on a CPU build, give the CPU's serial run within the layout tolerances
# (tests/mpi/serial_reference.sh): the files hold whole tensors in llm.c's order, whatever wrote
# them.
GPU_TRAIN=${MPIFORMER_TRAIN:?set MPIFORMER_TRAIN to the trainer of the GPU build}
if [ -z "${MPIFORMER_CPU_TRAIN:-}" ] || [ ! -x "${MPIFORMER_CPU_TRAIN:-}" ]; then
  echo "skipped: resuming on the CPU needs a CPU build's trainer: set MPIFORMER_CPU_TRAIN (ci/gpu/run.sh does)"
  exit 77
fi
export MPIFORMER_TRAIN=$MPIFORMER_CPU_TRAIN  # the serial reference is the CPU's
source "$(dirname "$0")/../mpi/serial_reference.sh"
source "$(dirname "$0")/common.sh"
require_gpu "$GPU_TRAIN"

serial 8 || exit 1
first=()  # the serial run's arguments, stopping after step 3 of its 5
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[i]}" = --steps ]; then
    first+=(--steps 3 --lr-decay-steps "${args[i + 1]}")
    i=$((i + 1))
  else
    first+=("${args[i]}")
  fi
done
ckpt="$WORK/ckpt"
OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n 2 "$GPU_TRAIN" "${first[@]}" --batch 8 --tp 2 \
  --save "$ckpt" >"$WORK/gpu.log" 2>&1
gpu_status=$?
OMP_NUM_THREADS=1 timeout 300 "$TRAIN" "${args[@]}" --batch 8 --load "$ckpt" \
  --save-llmc "$WORK/resumed.bin" >"$WORK/cpu.log" 2>&1
cpu_status=$?
cat "$WORK/gpu.log" "$WORK/cpu.log" >"$WORK/chain.log"
cp "$WORK/resumed.bin" "$WORK/chain.bin" 2>/dev/null
# Without these a failed GPU run passes: --load of a directory with no checkpoint starts afresh,
# and the CPU's own 5 steps equal its serial run.
if [ "$gpu_status" -ne 0 ] || [ "$cpu_status" -ne 0 ]; then
  bad "GPU run exit $gpu_status, CPU resume exit $cpu_status"
  tail -n 4 "$WORK/gpu.log" "$WORK/cpu.log"
elif ! grep -q '^resumed: .*step 3 of 5' "$WORK/cpu.log"; then
  bad "the CPU run did not resume the GPU's step 3: $(grep -m1 -E '^(resumed|note)' "$WORK/cpu.log")"
elif compare chain 8; then
  ok "3 steps on the GPU (tp 2), saved, 2 resumed on the CPU = the CPU's serial 5 steps"
else
  bad "saved on the GPU, resumed on the CPU"
  tail -n 4 "$WORK/gpu.log" "$WORK/cpu.log"
fi
finish
