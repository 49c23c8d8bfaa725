#!/usr/bin/env bash
# --precision bf16 trains as well as fp32: `make run`'s job (the default model, 2 ranks, 200 steps)
# in bf16 ends within 2% of the fp32 run's final loss. bf16 rounds each product's inputs to 8
# significant bits (2^-8 = 0.4% relative per rounding); with fp32 master weights, gradients and
# optimizer state these roundings act as noise on the updates, not as a bias that accumulates, so
# after 200 steps the loss (~1.0 from 5.55) must land within a few tenths of a percent of fp32's;
# 2% is the issue's bound. Exit 77 (skipped) where no library here has native bf16 products.
source "$(dirname "$0")/common.sh"

final_loss() { sed -nE 's/^summary \| steps [0-9]+ \| final loss ([0-9.]+) .*/\1/p' "$1"; }

timeout 600 "$MPIEXEC" -n 2 "$TRAIN" --precision bf16 >"$WORK/bf16.log" 2>&1
status=$?
if [ "$status" -eq 2 ] && grep -q '^error: --precision bf16 needs native bf16' "$WORK/bf16.log"; then
  echo "skipped: $(grep -m1 '^error:' "$WORK/bf16.log")"
  exit 77
fi
timeout 600 "$MPIEXEC" -n 2 "$TRAIN" --precision fp32 >"$WORK/fp32.log" 2>&1
bf16=$(final_loss "$WORK/bf16.log")
fp32=$(final_loss "$WORK/fp32.log")
if [ "$status" -eq 0 ] && [ -n "$bf16" ] && [ -n "$fp32" ] &&
  "$PY" -c "import sys; sys.exit(0 if abs($bf16 - $fp32) <= 0.02 * $fp32 else 1)"; then
  ok "200 steps of the default job: bf16 final loss $bf16, fp32 $fp32 (within 2%)"
else
  bad "bf16 final loss '$bf16' vs fp32 '$fp32' (bf16 status $status)"
  tail -n 5 "$WORK/bf16.log" "$WORK/fp32.log"
fi
grep -q '^gemm: .* products in bf16' "$WORK/bf16.log" && ok "the bf16 run's banner says bf16" ||
  bad "the bf16 run's banner does not say bf16"
finish
