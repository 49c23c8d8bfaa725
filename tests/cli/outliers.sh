#!/usr/bin/env bash
# --skip-outliers: a gradient spike put into one step on purpose (the test-only
# MPIFORMER_TEST_FAULT multiplies rank 1's gradients by 1000 in step 30) is skipped on 2 ranks: its
# line says so, --metrics records it, the model and AdamW's moments after it are those before it
# (the checkpoints of steps 29 and 30), and every step until then is the unfaulted run's. A run
# resumed from step 20 keeps the window and skips step 30 alike; without --skip-outliers the spike
# is applied. --rerun-suspect computes the spike again: the fault, gone the second time, names
# rank 1 (exit 7); spikes of the data's own compute again to the same bits.
source "$(dirname "$0")/common.sh"

export OMP_NUM_THREADS=1
args=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --threads 1
  --lr-decay-steps 30 --outlier-window 16)
fault=30:1:1000
same_bits() { cmp -s "$1/step_00000029/$2_00000029.bin" "$1/step_00000030/$2_00000030.bin"; }
skip_line='^step 30: update skipped: its gradient norm [0-9.e+]+ is [0-9.]+ standard deviations above the last 16 steps'"'"' \(--skip-outliers 6; 1 skipped so far\)$'

# 1. The spike, skipped; checkpoints after steps 29 and 30.
MPIFORMER_TEST_FAULT=$fault timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 30 \
  --skip-outliers 6 --save "$WORK/skip" --save-every 29 --metrics "$WORK/skip.jsonl" \
  >"$WORK/skip.log" 2>&1
rc=$?
skips=$(grep -c "update skipped" "$WORK/skip.log")
if [ "$rc" -eq 0 ] && [ "$skips" -eq 1 ] && grep -qE "$skip_line" "$WORK/skip.log" &&
  grep -q '"kind":"outlier","step":30,' "$WORK/skip.jsonl" &&
  grep -q '^outliers: 1 update(s) skipped' "$WORK/skip.log"; then
  ok "the spike at step 30 skipped, alone: $(grep 'update skipped' "$WORK/skip.log" | cut -c1-100)..."
else
  bad "spike: exit $rc, $skips skip line(s)"; grep -E 'skipped|^error|^step 30' "$WORK/skip.log"
fi
same_bits "$WORK/skip" model && same_bits "$WORK/skip" optimizer &&
  ok "the skipped step changed neither the model nor AdamW's moments (step 29's files, bit for bit)" ||
  bad "the checkpoints of steps 29 and 30 differ"

# 2. The same run without the fault: the same steps up to the spike (its loss too: the loss comes
#    before the gradients are touched).
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 30 --skip-outliers 6 >"$WORK/clean.log" 2>&1 ||
  bad "the unfaulted run"
if ! grep -q "update skipped" "$WORK/clean.log" &&
  [ "$(numbers "$WORK/clean.log" | head -29)" = "$(numbers "$WORK/skip.log" | head -29)" ] &&
  [ "$(numbers "$WORK/clean.log" | sed -n 30p | cut -d'|' -f1-2)" = "$(numbers "$WORK/skip.log" | sed -n 30p | cut -d'|' -f1-2)" ]; then
  ok "unfaulted: nothing skipped; steps 1-29 and step 30's loss as the faulted run's"
else
  bad "the unfaulted run differs before the spike, or skipped a step"
fi

# 3. Resumed from step 20: the window comes back with the checkpoint, and step 30 is judged alike.
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 20 --skip-outliers 6 --save "$WORK/res" \
  >"$WORK/res1.log" 2>&1 || bad "the first part"
MPIFORMER_TEST_FAULT=$fault timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 30 \
  --skip-outliers 6 --load "$WORK/res" --save "$WORK/res" >"$WORK/res2.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -qE "$skip_line" "$WORK/res2.log" &&
  [ "$(numbers "$WORK/res1.log" "$WORK/res2.log")" = "$(numbers "$WORK/skip.log")" ]; then
  ok "resumed at step 21: the window kept, step 30 skipped, every step the uninterrupted run's"
else
  bad "resumed: exit $rc"; grep -E 'skipped|^error|^warning' "$WORK/res2.log"
fi

# 4. Without --skip-outliers the spike is applied (clipped): the model moves in step 30. Alone,
#    --outlier-window (the last two of args) is refused.
plain=("${args[@]:0:${#args[@]}-2}")
expect_error "--outlier-window without --skip-outliers" 1 \
  "^error: --outlier-window 16 sets the steps --skip-outliers compares with, and it is off; pass --skip-outliers Z too, or drop --outlier-window$" \
  -- "${args[@]}" --steps 2
MPIFORMER_TEST_FAULT=$fault timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${plain[@]}" --steps 30 \
  --save "$WORK/applied" --save-every 29 >"$WORK/applied.log" 2>&1 || bad "the run without the flag"
! grep -q "update skipped" "$WORK/applied.log" && ! same_bits "$WORK/applied" model &&
  ok "without --skip-outliers: the spike's update applied" || bad "without --skip-outliers"

# 5. --rerun-suspect: the spike computed again without the fault (a transient one, as hardware's)
#    gives rank 1 other gradients: exit 7, one error line naming rank 1 and its host.
MPIFORMER_TEST_FAULT=$fault timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 30 \
  --skip-outliers 6 --rerun-suspect --metrics "$WORK/suspect.jsonl" >"$WORK/suspect.log" 2>&1
rc=$?
errors=$(grep -c '^error:' "$WORK/suspect.log")
if [ "$rc" -eq 7 ] && [ "$errors" -eq 1 ] &&
  grep -qE "^error: step 30: computed again from the same state, the gradients of rank 1 on $(hostname) came out different" "$WORK/suspect.log" &&
  grep -q '"kind":"suspect","step":30,' "$WORK/suspect.jsonl"; then
  ok "a transient fault: exit 7, $(grep '^error:' "$WORK/suspect.log" | cut -c1-110)..."
else
  bad "a transient fault: exit $rc, $errors error line(s)"; grep -E '^error|skipped' "$WORK/suspect.log"
fi

# 6. Spikes of the data's own (over a window of 2 steps, --skip-outliers 0.5 flags ordinary steps):
#    each computed again agrees, and the run is bit for bit the one without --rerun-suspect.
low=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --threads 1
  --lr-decay-steps 30 --outlier-window 2 --skip-outliers 0.5 --steps 30)
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${low[@]}" >"$WORK/low.log" 2>&1 || bad "--skip-outliers 0.5"
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${low[@]}" --rerun-suspect >"$WORK/low_rerun.log" 2>&1
rc=$?
reruns=$(grep -c '^step [0-9]*: computed again from the same state: the same bits on every rank' "$WORK/low_rerun.log")
skipped=$(grep -c 'update skipped' "$WORK/low.log")
if [ "$rc" -eq 0 ] && [ "$reruns" -ge 1 ] && [ "$reruns" -eq "$skipped" ] &&
  [ "$(numbers "$WORK/low_rerun.log")" = "$(numbers "$WORK/low.log")" ]; then
  ok "the data's spikes: $reruns step(s) computed again, the same bits; the run as without --rerun-suspect"
else
  bad "the data's spikes: exit $rc, $reruns re-run(s) for $skipped flagged step(s)"
fi
expect_error "--rerun-suspect with --overlap-grad-reduce" 2 \
  "^error: --rerun-suspect compares each rank's gradients before they are reduced, and --overlap-grad-reduce reduces them during the backward; drop one of the two$" \
  -- "${args[@]}" --steps 2 --rerun-suspect --overlap-grad-reduce
finish
