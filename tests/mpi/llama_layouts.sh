#!/usr/bin/env bash
# The Llama family on every kind of layout (docs/design.md, invariant 3; serial_reference.sh says
# within what, and why): a tiny Llama (RMSNorm, rotary embeddings with llama3 scaling, SwiGLU,
# grouped-query attention, untied head) reproduces its serial run under TP 2 and 4 with kv heads
# split (KVH 4 over TP 2, 2 over 2) and replicated (KVH 1 over TP 2 and 4, KVH 2 over TP 4), with
# sequence parallelism, DP 2 with ZeRO-1 and overlapped buckets, pipelines under 1F1B,
# interleaved, ZB-H1 and ZB-V, and recomputation (selective: the same bits as none, on TP 2 + SP
# and under ZB-H1's deferred W); a tied Llama on TP and PP. Then a checkpoint
# saved on one layout resumes on another and ends where the uninterrupted run does.
LAYERS=4
source "$(dirname "$0")/serial_reference.sh"
base=("${args[@]}")
llama() {  # llama KVH [TIED]: the Llama flags with KVH kv heads (4 heads, hs 16, F 96), untied
  args=("${base[@]}" --arch llama --kv-heads "$1" --ffn-dim 96 --norm-eps 1e-6 --rope-theta 10000
    --rope-scaling 8,1,4,16 --tie-embeddings "${2:-0}")
}

# Each KVH has its own serial run: its runs go to their own folder under the test's.
ROOT=$WORK
for kvh in 2 1; do
  llama $kvh
  WORK=$ROOT/kvh$kvh
  mkdir -p "$WORK"
  TAG=kvh$kvh
  run_layout 2 1
  run_layout 4 1
  run_layout 2 1 --sequence-parallel
  if [ $kvh = 2 ]; then
    tp2_sp_log=$LAST_LOG
    run_layout 2 1 --sequence-parallel --recompute selective
    same_bits "$tp2_sp_log" "$LAST_LOG" "llama tp 2 + sp --recompute selective"
    run_layout 1 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
    run_layout 2 2 --zero 1 --sequence-parallel
    run_layout 1 1 --pp 2 --microbatches 4
    run_layout 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2
    run_layout 1 1 --pp 2 --schedule zb-h1 --microbatches 4
    zbh1_log=$LAST_LOG
    run_layout 1 1 --pp 2 --schedule zb-h1 --microbatches 4 --recompute selective
    same_bits "$zbh1_log" "$LAST_LOG" "llama zb-h1 --recompute selective (W deferred)"
    run_layout 1 1 --pp 2 --schedule zb-v --microbatches 2
    run_layout 2 1 --pp 2 --microbatches 2 --recompute
  fi
done

# A tied Llama: wte is the head on the last stage too, its gradient summed across the stages.
llama 2 1
WORK=$ROOT/tied
mkdir -p "$WORK"
TAG=tied
run_layout 2 1
run_layout 1 1 --pp 2 --microbatches 2

# A checkpoint of TP 2 (kv heads replicated) resumed on PP 2 x DP 2 ends where the uninterrupted
# TP 2 run does.
# (--lr-decay-steps 5: the first part stops at step 3 on the 5-step run's schedule.)
llama 1
WORK=$ROOT/kvh1
ckpt=$WORK/ckpt
first=()  # the run's flags but its --steps 5
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[i]}" = --steps ]; then i=$((i + 1)); else first+=("${args[i]}"); fi
done
if OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${first[@]}" --batch 8 --tp 2 --steps 3 \
  --lr-decay-steps 5 --save "$ckpt" >"$WORK/part1.log" 2>&1 &&
  OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n 4 "$TRAIN" --steps 5 --pp 2 --dp 2 \
    --microbatches 2 --load "$ckpt" --save-llmc "$WORK/resumed.bin" >"$WORK/part2.log" 2>&1; then
  grep -h '^step' "$WORK/part1.log" "$WORK/part2.log" >"$WORK/resumed.log"
  if compare resumed 8; then
    ok "llama: saved on tp 2 (kv heads replicated), resumed on pp 2 x dp 2 = serial"
  else
    bad "llama: checkpoint resumed on another layout"
  fi
else
  bad "llama: checkpoint save/resume runs"
  tail -n 5 "$WORK/part1.log" "$WORK/part2.log"
fi
WORK=$ROOT
finish
