#!/usr/bin/env bash
# The code paths of a GPU build, run on the CPU where CI can check them: the kernels in their
# device shape (a team of threads per row, a thread per element, column sums in two passes, the
# embedding's gradient by sorted token runs: core/parallel.hpp), selected by the test hook
# MPIFORMER_TEST_KERNEL_SHAPE=device, and every MPI message staged through host buffers as with an
# MPI that cannot read GPU memory (--gpu-aware-mpi no: parallel/device_mpi.hpp).
#   1. Each layout, so run, reproduces the serial host-shaped run within the layout tolerances
#      (serial_reference.sh): the device shape changes only the order of its sums.
#   2. Staging alone changes nothing: a layout direct and staged gives the same bits.
#   3. A checkpoint written by a device-shaped, staged run resumes in the host shape.
#   4. Host transfers (--profile): one batch copy, one loss read and one gradient-norm read a step,
#      and staged messages only when staging.
LAYERS=4
source "$(dirname "$0")/serial_reference.sh"
serial 8 || exit 1  # the reference, host-shaped and direct

gpu() { MPIFORMER_TEST_KERNEL_SHAPE=device TAG=device-shape run_layout "$@" --gpu-aware-mpi no; }
gpu 1 1
gpu 2 1
gpu 2 1 --sequence-parallel
gpu 1 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
gpu 1 1 --pp 2 --microbatches 4
gpu 1 1 --pp 2 --microbatches 4 --schedule zb-h1
gpu 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2
gpu 2 1 --pp 2 --microbatches 2 --schedule zb-v --sequence-parallel --recompute

# 2. Direct and staged, the same bits.
for layout in "--tp 2 --sequence-parallel" "--pp 2 --microbatches 4 --schedule zb-h1" \
  "--dp 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05"; do
  read -ra flags <<<"$layout"
  for mode in yes no; do
    OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --batch 8 "${flags[@]}" \
      --gpu-aware-mpi "$mode" --save-llmc "$WORK/staged_$mode.bin" >"$WORK/staged_$mode.log" 2>&1
  done
  if cmp -s "$WORK/staged_yes.bin" "$WORK/staged_no.bin" &&
    [ -n "$(numbers "$WORK/staged_no.log")" ] &&
    [ "$(numbers "$WORK/staged_yes.log")" = "$(numbers "$WORK/staged_no.log")" ]; then
    ok "$layout: staged through host buffers = handed to MPI directly, bit for bit"
  else
    bad "$layout: staged and direct differ"
    tail -3 "$WORK/staged_no.log"
  fi
  rm -f "$WORK"/staged_*
done

# 3. Saved device-shaped and staged at step 3 of 5 (tp 2), resumed host-shaped on one rank: the
# serial run's losses and parameters.
ckpt="$WORK/ckpt"
MPIFORMER_TEST_KERNEL_SHAPE=device OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n 2 "$TRAIN" \
  "${args[@]}" --batch 8 --tp 2 --gpu-aware-mpi no --steps 3 --lr-decay-steps 5 --save "$ckpt" \
  >"$WORK/first.log" 2>&1
OMP_NUM_THREADS=1 timeout 120 "$TRAIN" "${args[@]}" --batch 8 --load "$ckpt" \
  --save-llmc "$WORK/resumed.bin" >"$WORK/resumed.log" 2>&1
cat "$WORK/first.log" "$WORK/resumed.log" >"$WORK/chain.log"
cp "$WORK/resumed.bin" "$WORK/chain.bin"
if compare chain 8; then
  ok "saved device-shaped and staged on tp 2, resumed host-shaped on 1 rank = serial"
else
  bad "checkpoint from the GPU paths, resumed in the host shape"
  tail -3 "$WORK/first.log" "$WORK/resumed.log"
fi

# 4. What crosses to the host, per step and rank (rank 0's profile).
transfers() {  # transfers LOG: "label calls" lines of the profile's transfer table
  sed -n '/host <-> kernels/,/^stage\|^summary\|^$/p' "$1" | awk 'NF >= 4 && $1 ~ /^[hd]2[hd]$/ {
    label = $1; for (i = 2; i <= NF - 3; ++i) label = label " " $i; print label ": " $(NF - 2) }'
}
for mode in yes no; do
  OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --batch 8 --pp 2 \
    --microbatches 4 --gpu-aware-mpi "$mode" --profile >"$WORK/profile_$mode.log" 2>&1
done
direct=$(transfers "$WORK/profile_yes.log" | sort | tr '\n' ';')
staged=$(transfers "$WORK/profile_no.log" | sort | tr '\n' ';')
want="d2h gradient norm: 1.0;d2h loss: 1.0;h2d batch: 1.0;"
[ "$direct" = "$want" ] && ok "direct: one batch copy, one loss and one norm read a step ($direct)" ||
  bad "direct: transfers a step are '$direct', expected '$want'"
[[ "$staged" == *"d2h pipeline (staged): 4.0"* && "$staged" == *"h2d pipeline (staged): 4.0"* &&
  "$staged" == *"d2h loss: 1.0"* && "$staged" == *"h2d batch: 1.0"* ]] &&
  ok "staged: stage 0 sends and receives its 4 microbatches through host buffers ($staged)" ||
  bad "staged: transfers a step are '$staged'"
finish
