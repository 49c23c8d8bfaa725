#!/usr/bin/env bash
# The parallel layouts on one GPU: 2 ranks share it (each takes local rank mod visible GPUs), and
# with an MPI that is not CUDA-aware (Debian's MPICH) every TP, PP and DP message is staged through
# pinned host buffers (--gpu-aware-mpi auto), a mixture of experts' all-to-alls too. Each layout
# must reproduce the GPU's serial run within the layout tolerances (tests/mpi/serial_reference.sh).
LAYERS=4
source "$(dirname "$0")/../mpi/serial_reference.sh"
source "$(dirname "$0")/common.sh"
require_gpu "$TRAIN"

run_layout 2 1
run_layout 2 1 --sequence-parallel
run_layout 1 1 --pp 2 --microbatches 4
run_layout 1 1 --pp 2 --microbatches 4 --schedule zb-h1
run_layout 1 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
mpi=$(grep -m1 '^mpi: ' "$LAST_LOG")
# A mixture of experts: EP 2, the tokens' rows exchanged by all-to-all through the staging
# buffers, the experts' gradients summed over their own group (alone here), with ZeRO too.
args+=(--arch mixtral --kv-heads 2 --ffn-dim 64 --experts 4 --experts-per-token 2)
BATCH=4 run_layout 1 2 --ep 2
BATCH=4 run_layout 1 2 --ep 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.01
[[ "$mpi" == *"staged"* || "$mpi" == *"CUDA-aware"* ]] && ok "MPI and GPU memory: $mpi" ||
  bad "the banner should say how MPI reaches GPU memory: $mpi"
finish
