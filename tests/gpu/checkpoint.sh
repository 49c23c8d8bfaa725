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
ckpt="$WORK/ckpt"
OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n 2 "$GPU_TRAIN" "${args[@]}" --batch 8 --tp 2 \
  --steps 3 --lr-decay-steps 5 --save "$ckpt" >"$WORK/gpu.log" 2>&1
OMP_NUM_THREADS=1 timeout 300 "$TRAIN" "${args[@]}" --batch 8 --load "$ckpt" \
  --save-llmc "$WORK/resumed.bin" >"$WORK/cpu.log" 2>&1
cat "$WORK/gpu.log" "$WORK/cpu.log" >"$WORK/chain.log"
cp "$WORK/resumed.bin" "$WORK/chain.bin" 2>/dev/null
if compare chain 8; then
  ok "3 steps on the GPU (tp 2), saved, 2 resumed on the CPU = the CPU's serial 5 steps"
else
  bad "saved on the GPU, resumed on the CPU"
  tail -4 "$WORK/gpu.log" "$WORK/cpu.log"
fi
finish
