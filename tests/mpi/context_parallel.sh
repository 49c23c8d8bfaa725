#!/usr/bin/env bash
# Context parallelism (--cp, model/layers/ring_attention.hpp) on every kind of layout reproduces
# the serial run (docs/design.md, invariant 3; serial_reference.sh says within what, and why):
# GPT-2 (its position table read at each chunk's positions) on CP 2 and 4, with TP 2 and sequence
# parallelism; a Llama with grouped-query attention (rotary angles at each chunk's positions) on
# CP 2 and 4, with TP 2 (+SP), PP 2 under 1F1B, interleaved, ZB-H1 and ZB-V, DP 2 with ZeRO-1,
# and recomputation; the same in bf16; document masking (--doc-mask) serial and on CP 2 x TP 2,
# which changes the losses; the chunked attention path (--attention chunked) serial and on CP 2,
# in bf16, with documents and a sliding window; and a checkpoint saved on CP 2 resumed on CP 1 and
# on CP 4.
LAYERS=4
source "$(dirname "$0")/serial_reference.sh"
base=("${args[@]}")
ROOT=$WORK

group() {  # group NAME FLAGS...: the runs that follow compare with their own serial run
  WORK=$ROOT/$1
  mkdir -p "$WORK"
  TAG=$1
  shift
  args=()
  for a in "${base[@]}"; do args+=("${a/#fp32/$PRECISION}"); done  # --precision's value
  args+=("$@")
}

group gpt2
run_layout 1 1 --cp 2
run_layout 1 1 --cp 4
run_layout 2 1 --cp 2 --sequence-parallel

llama=(--arch llama --kv-heads 2 --ffn-dim 96 --norm-eps 1e-6 --rope-theta 10000
  --rope-scaling 8,1,4,16 --tie-embeddings 0)
group llama "${llama[@]}"
run_layout 1 1 --cp 2
run_layout 1 1 --cp 4
run_layout 2 1 --cp 2
run_layout 2 1 --cp 2 --sequence-parallel
run_layout 1 1 --cp 2 --pp 2 --microbatches 4
run_layout 1 1 --cp 2 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2
run_layout 1 1 --cp 2 --pp 2 --schedule zb-h1 --microbatches 4
run_layout 1 1 --cp 2 --pp 2 --schedule zb-v --microbatches 2
run_layout 1 2 --cp 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
# ZeRO-2/3 shard the blocks over DP x CP, as ZeRO-1 shards the optimizer state.
run_layout 1 2 --cp 2 --zero 2
run_layout 1 1 --cp 2 --zero 3 --microbatches 2
run_layout 1 2 --cp 2 --recompute
# The chunked attention (--attention chunked: a chunk of queries at a time through the GEMM
# library) against the serial run's fused kernel, on 1 rank and through CP 2's ring of blocks.
run_layout 1 1 --attention chunked --profile
if grep -q 'mpf::chunked_attention_softmax' "$LAST_LOG" &&
  ! grep -q 'mpf::attention_forward' "$LAST_LOG"; then
  ok "--attention chunked runs the chunked kernels, not the fused one"
else
  bad "--attention chunked did not run the chunked kernels: $LAST_LOG"
fi
run_layout 1 1 --cp 2 --attention chunked

# bf16, where this CPU runs bf16 products natively (serial_reference.sh's tolerances for it).
if "$TRAIN" --precision bf16 --steps 1 --val-every 0 --layers 1 --dim 32 --heads 2 2>&1 |
  grep -q '^error: --precision bf16 needs native bf16'; then
  echo "note: bf16 with CP not run: this CPU has no native bf16 products"
else
  saved_rtol=("$LOSS_RTOL" "$PARAM_RTOL")
  LOSS_RTOL=1e-4 PARAM_RTOL=5e-3 PRECISION=bf16
  group llama_bf16 "${llama[@]}"
  run_layout 1 1 --cp 2
  run_layout 2 1 --cp 2 --sequence-parallel --recompute
  run_layout 1 1 --cp 2 --attention chunked
  LOSS_RTOL=${saved_rtol[0]} PARAM_RTOL=${saved_rtol[1]} PRECISION=fp32
fi

# Document masking: the built-in corpus is bytes, and each newline (10) starts a document, so a
# row of 32 holds several. Masked attention trains another model than unmasked does.
group llama_docs "${llama[@]}" --doc-mask --doc-token 10
run_layout 1 1 --cp 2
run_layout 2 1 --cp 2 --sequence-parallel
run_layout 1 1 --cp 2 --pp 2 --microbatches 2
run_layout 1 1 --cp 2 --attention chunked
# A sliding window within the documents, through both attention paths.
group llama_window "${llama[@]}" --doc-mask --doc-token 10 --sliding-window 5
run_layout 1 1 --attention chunked
run_layout 1 1 --cp 2 --attention chunked
if "$PY" - "$ROOT/llama/serial_8.log" "$ROOT/llama_docs/serial_8.log" <<'PYEOF'; then
import re, sys
def losses(p):
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 5 and a[0] != b[0], (a, b)
print(f"  first loss {a[0]} unmasked, {b[0]} masked")
PYEOF
  ok "--doc-mask changes the losses: attention stays within documents"
else
  bad "--doc-mask left the losses as they were"
fi

# A checkpoint saved by CP 2 at step 3 resumes on CP 1 and on CP 4, each ending where the
# uninterrupted serial run does (--lr-decay-steps 5: the first part stops on the 5-step schedule).
group llama "${llama[@]}"
first=()
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[i]}" = --steps ]; then i=$((i + 1)); else first+=("${args[i]}"); fi
done
ckpt=$WORK/ckpt
if OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${first[@]}" --batch 8 --cp 2 --steps 3 \
  --lr-decay-steps 5 --save "$ckpt" >"$WORK/part1.log" 2>&1; then
  for cp in 1 4; do
    if OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n "$cp" "$TRAIN" --steps 5 --cp "$cp" \
      --load "$ckpt" --save-llmc "$WORK/resumed_cp$cp.bin" >"$WORK/part2_cp$cp.log" 2>&1 &&
      grep -q '^resumed: .*step 3 of 5' "$WORK/part2_cp$cp.log"; then
      grep -h '^step' "$WORK/part1.log" "$WORK/part2_cp$cp.log" >"$WORK/resumed_cp$cp.log"
      if compare "resumed_cp$cp" 8; then
        ok "saved on cp 2 at step 3, resumed on cp $cp = serial"
      else
        bad "saved on cp 2, resumed on cp $cp"
      fi
    else
      bad "resuming cp 2's checkpoint on cp $cp"
      tail -n 5 "$WORK/part2_cp$cp.log"
    fi
  done
else
  bad "cp 2: the checkpoint run"
  tail -n 5 "$WORK/part1.log"
fi
WORK=$ROOT
finish
