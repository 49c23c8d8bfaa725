#!/usr/bin/env bash
# docs/design.md, invariant 3: every layout reproduces the serial run. For each (tp, dp) with
# tp·dp <= 4, plain, with ZeRO-1, with the gradient reduction overlapped in small buckets, and both,
# and with tp > 1 also with sequence parallelism; gradient accumulation over microbatches with
# both schedules; ZeRO-2 and ZeRO-3 (with EP too, and sharded within two posed hosts); and one
# 8-rank layout. Five steps of a tiny model from the same seed must give
# the serial run's losses and, after the last update, its parameters (serial_reference.sh says
# within what, and why), and --qk-clip on TP, DP with ZeRO-1 and CP. Pipeline layouts are in
# pipeline.sh.
source "$(dirname "$0")/serial_reference.sh"

# Buckets of 0.05 MB cut this model's gradients into a dozen pieces that become ready at different
# points of the backward.
# In bf16 (mpi_layouts_bf16) the 2-rank layouts and TP 2 x DP 2: 4 ranks along one dimension and 8
# ranks (oversubscribed here) are the fp32 run's, the same collectives over bf16-rounded products.
layouts=("1 2" "2 1" "2 2")
[ "$PRECISION" != fp32 ] || layouts+=("4 1" "1 4")
for layout in "${layouts[@]}"; do
  run_layout $layout
  [ "$layout" != "1 2" ] || dp2_log=$LAST_LOG
  [ "$layout" != "2 1" ] || tp2_log=$LAST_LOG
  run_layout $layout --zero 1
  run_layout $layout --overlap-grad-reduce --dp-bucket-mb 0.05
  run_layout $layout --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
  if [ "${layout%% *}" -gt 1 ]; then
    run_layout $layout --sequence-parallel
    [ "$layout" != "2 1" ] || tp2_sp_log=$LAST_LOG
    run_layout $layout --sequence-parallel --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
  fi
done
# Gradient accumulation over microbatches, run by the schedule loops, on one rank and combined.
run_layout 1 1 --microbatches 4
run_layout 1 1 --microbatches 4 --schedule afab
run_layout 2 1 --microbatches 4 --schedule afab
run_layout 2 2 --microbatches 2 --sequence-parallel --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
# 8 ranks are oversubscribed on 2 cores (~25 ms a collective): one layout only, in fp32.
if [ "$PRECISION" = fp32 ]; then
  OMP_WAIT_POLICY=PASSIVE run_layout 2 4 --sequence-parallel --zero 1 --overlap-grad-reduce \
    --dp-bucket-mb 0.05
fi
# ZeRO-2 and ZeRO-3 (optim/sharded_blocks.hpp): each block's gradients reduce-scattered from a
# pool after every microbatch's W, and under ZeRO-3 its parameters gathered before each use: with
# gradient accumulation, TP with SP (the norms' TP sums at every W), full and selective
# recomputation (the gather serves the recomputed forwards), W apart from B (zb-h1), and 4 ranks.
for z in 2 3; do
  run_layout 1 2 --zero $z --microbatches 2
  run_layout 2 2 --zero $z --sequence-parallel --microbatches 2
done
run_layout 1 2 --zero 3 --overlap-grad-reduce --dp-bucket-mb 0.05
if [ "$PRECISION" = fp32 ]; then
  run_layout 1 4 --zero 2 --microbatches 2
  run_layout 1 4 --zero 3 --microbatches 2
  run_layout 1 2 --zero 3 --recompute full --microbatches 2
  run_layout 1 2 --zero 3 --recompute selective --schedule zb-h1 --microbatches 2
fi
# --zero-group node (HSDP): DP 4 as 2 hosts x 2 ranks, each shard reduce-scattered (and under
# ZeRO-3 gathered) within its host and summed across the two; the banner says so.
if [ "$PRECISION" = fp32 ]; then
  for z in 1 2 3; do
    NODES=2 run_layout 1 4 --zero $z --zero-group node --microbatches 2
    grep -q "^data parallel: --zero-group node: shards over the 2 rank(s) of each node, replicated on 2 nodes" "$LAST_LOG" &&
      ok "--zero $z --zero-group node: sharded within each of the 2 hosts" ||
      bad "--zero $z --zero-group node: no line of the node groups in $LAST_LOG"
  done
fi
# ZeRO-2/3 under EP (a mixture of experts): the experts' part of each block sharded over their
# expert-DP group, the rest over DP. Its own serial run, in a folder of its own.
if [ "$PRECISION" = fp32 ]; then
  dense=("${args[@]}")
  args+=(--arch mixtral --kv-heads 2 --ffn-dim 48 --experts 4 --experts-per-token 2)
  outer=$WORK
  WORK=$outer/experts
  mkdir -p "$WORK"
  run_layout 1 2 --ep 2 --zero 2
  ep2_log=$LAST_LOG
  # The all-to-alls overlapped with the experts' products (--moe-a2a-chunks): each expert's
  # product unchanged, so the blocking run's bits, direct (under ZeRO-2) and staged through host
  # copies.
  run_layout 1 2 --ep 2 --zero 2 --moe-a2a-chunks 2
  same_bits "$ep2_log" "$LAST_LOG" "--ep 2 --moe-a2a-chunks 2"
  run_layout 1 2 --ep 2
  ep2_log=$LAST_LOG
  run_layout 1 2 --ep 2 --moe-a2a-chunks 2 --gpu-aware-mpi no
  same_bits "$ep2_log" "$LAST_LOG" "--ep 2 --moe-a2a-chunks 2 staged"
  OMP_WAIT_POLICY=PASSIVE run_layout 1 4 --ep 2 --zero 3 --microbatches 2
  WORK=$outer
  args=("${dense[@]}")
fi
# In bf16 the overlapped all-to-alls too: the experts' products round the same inputs in either
# dispatch, so the blocking run's bits.
if [ "$PRECISION" = bf16 ]; then
  dense=("${args[@]}")
  args+=(--arch mixtral --kv-heads 2 --ffn-dim 48 --experts 4 --experts-per-token 2)
  outer=$WORK
  WORK=$outer/experts
  mkdir -p "$WORK"
  run_layout 1 2 --ep 2
  ep2_log=$LAST_LOG
  run_layout 1 2 --ep 2 --moe-a2a-chunks 2
  same_bits "$ep2_log" "$LAST_LOG" "--ep 2 --moe-a2a-chunks 2 (bf16)"
  WORK=$outer
  args=("${dense[@]}")
fi
# --grad-reduce-dtype bf16 (optim/grad_buckets.hpp): each DP bucket rounded to bf16 and summed
# with each partial sum rounded. A gradient element then moves by up to 2^-8 relative, which
# AdamW's m/sqrt(v) passes on to its update about as a product's rounded input moves its output:
# within the bf16 layouts' tolerances of the serial run (serial_reference.sh), and not the fp32
# reduction's bits (it is on); plain, ZeRO-1 in overlapped buckets, and through staged host copies.
if [ "$PRECISION" = bf16 ]; then
  run_layout 1 2 --grad-reduce-dtype bf16
  if cmp -s "${dp2_log%.log}.bin" "${LAST_LOG%.log}.bin"; then
    bad "--grad-reduce-dtype bf16 left the fp32 reduction's parameters as they were"
  else ok "--grad-reduce-dtype bf16 changes the bits (the buckets are rounded)"; fi
  run_layout 1 2 --grad-reduce-dtype bf16 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
  run_layout 1 2 --grad-reduce-dtype bf16 --gpu-aware-mpi no
  # Under --zero-group node the buckets are rounded within each host; the shard's sum across the
  # two hosts is fp32.
  NODES=2 run_layout 1 4 --grad-reduce-dtype bf16 --zero 1 --zero-group node
fi
# --tp-comm-dtype bf16 (parallel/tp_regions.hpp): each TP collective's payload rounded to bf16, as
# Megatron's, and summed in fp32 pair by pair: the row-parallel outputs' partial sums (the
# residual and bias join after, in fp32), SP's gathered norm outputs, and the input gradients'
# partial sums and gathers in the backward. Each of those values moves by up to 2^-8 relative
# once more, another sparse bf16 step like the products' rounded inputs (serial_reference.sh):
# measured within 6.0e-5 (losses) and 3.6e-3 (parameters) of the fp32 payloads' TP 2 run and of
# the serial run, with and without SP, so both within the bf16 layouts' tolerances (a wrong join
# of the residual moves the losses by far more). Not the fp32 payloads' bits (it is on); two runs
# and the staged host copies give the same bits.
if [ "$PRECISION" = bf16 ]; then
  for sp in "" --sequence-parallel; do
    what="tp 2${sp:+ $sp} --tp-comm-dtype bf16" fp32_log=$tp2_log
    [ -z "$sp" ] || fp32_log=$tp2_sp_log
    run_layout 2 1 $sp --tp-comm-dtype bf16
    first=$LAST_LOG
    compare_runs "$fp32_log" "$first" && ok "$what: close to the fp32 payloads' run" ||
      bad "$what: not within the bf16 tolerances of the fp32 payloads' run"
    if cmp -s "${fp32_log%.log}.bin" "${first%.log}.bin"; then
      bad "$what left the fp32 payloads' parameters as they were"
    else ok "$what changes the bits (the payloads are rounded)"; fi
    TAG=again run_layout 2 1 $sp --tp-comm-dtype bf16
    same_bits "$first" "$LAST_LOG" "$what run twice"
    run_layout 2 1 $sp --tp-comm-dtype bf16 --gpu-aware-mpi no
    same_bits "$first" "$LAST_LOG" "$what staged through host copies"
  done
fi
# --qk-clip (optim/qk_clip.hpp) at 0.05, under this model's logits, so heads are scaled after
# every update: each rank scales its heads from the largest logits agreed over DP (under ZeRO-1
# after the gather) and merged over CP's ring blocks, TP's heads split: the serial run's losses
# and parameters. Its own serial run, in a folder of its own.
if [ "$PRECISION" = fp32 ]; then
  args+=(--qk-clip 0.05)
  outer=$WORK
  WORK=$outer/qk_clip
  mkdir -p "$WORK"
  run_layout 2 1
  run_layout 1 2 --zero 1
  run_layout 1 1 --cp 2
  clipped=$(grep -c '^step .* | qk logit [0-9.]*, [1-9][0-9]* clipped' "$WORK/serial_8.log")
  [ "$clipped" -eq 5 ] && ok "--qk-clip: heads clipped at each of the serial run's 5 steps" ||
    bad "--qk-clip: the serial run clipped heads at $clipped of 5 steps"
  WORK=$outer
fi
finish
