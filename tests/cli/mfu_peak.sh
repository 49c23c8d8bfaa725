#!/usr/bin/env bash
# MFU never reads above 100% without a line saying why. A start-up on busy cores (simulated,
# deterministically, by MPIFORMER_TEST_BUSY_START: the start-up measurement reads that fraction of
# the machine's rate) is caught by the first step faster than the peak, which is then measured
# again on every rank; a --peak-gflops below what the steps reach keeps its value and gets one
# warning; the summary names the peak it used.
source "$(dirname "$0")/common.sh"

mfus() { sed -nE 's/^step .*\| MFU ([0-9.]+)%$/\1/p' "$1"; }
over_100() { mfus "$1" | awk '$1 > 100 { n++ } END { print n + 0 }'; }
tiny=(--steps 6 --val-every 0 --layers 2 --dim 64 --heads 2 --batch 4 --seq-len 32)

# 1. A quiet start-up: no note, no warning, the summary says where its peak came from.
OMP_NUM_THREADS=2 timeout 120 "$TRAIN" "${tiny[@]}" >"$WORK/quiet.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && ! grep -qE '^(peak:|warning: MFU)' "$WORK/quiet.log" &&
  grep -qE '^summary .*\| peak [0-9.]+ GFLOP/s/rank \([^)]*measured at start-up\)$' "$WORK/quiet.log"; then
  ok "quiet start-up: no note, the summary names the peak ($(grep -oE 'peak [0-9.]+ GFLOP/s/rank' "$WORK/quiet.log"))"
else
  bad "quiet start-up (exit $rc)"; cat "$WORK/quiet.log"
fi

# 2. A busy start-up on 1 and 2 ranks: the start-up peak reads 1/10000 of the machine's, so every
#    step would read far above 100%; the first one measures the peak again.
for ranks in 1 2; do
  log="$WORK/busy$ranks.log"
  MPIFORMER_TEST_BUSY_START=0.0001 OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n "$ranks" "$TRAIN" \
    "${tiny[@]}" >"$log" 2>&1
  rc=$?
  notes=$(grep -c '^peak: step [0-9]* ran at .* measured again' "$log")
  # Measured again at step 1. A neighbour that keeps the cores busy may have it measured once or
  # twice more (at most 3 times a run), and past that a line above 100% must come with a warning.
  if [ "$rc" -eq 0 ] && [ "$notes" -ge 1 ] && [ "$notes" -le 3 ] &&
    grep -m1 '^peak:' "$log" | grep -q '^peak: step 1 ran at' && [ "$(mfus "$log" | wc -l)" -ge 2 ] &&
    { [ "$(over_100 "$log")" -eq 0 ] || grep -q '^warning: MFU above 100%' "$log"; } &&
    grep -qE '^summary .*\(.*measured again at step [0-9]+: [0-9.]+ at start-up\)$' "$log"; then
    ok "busy start-up on $ranks rank(s): measured again at step 1 ($notes time(s) in all), MFU $(mfus "$log" | tr '\n' ' ')"
  else
    bad "busy start-up on $ranks rank(s): exit $rc, $notes note(s), $(over_100 "$log") line(s) over 100%"
    cat "$log"
  fi
done

# 3. --peak-gflops below the steps' rate: kept as given, one warning for the whole run.
OMP_NUM_THREADS=2 timeout 120 "$TRAIN" "${tiny[@]}" --peak-gflops 0.0001 >"$WORK/given.log" 2>&1
rc=$?
warnings=$(grep -c '^warning: MFU above 100% from step 1: .*more than --peak-gflops allows' "$WORK/given.log")
if [ "$rc" -eq 0 ] && [ "$warnings" -eq 1 ] && ! grep -q '^peak:' "$WORK/given.log" &&
  [ "$(over_100 "$WORK/given.log")" -ge 1 ] &&
  grep -qE '^summary .*\| peak 0.0 GFLOP/s/rank \(--peak-gflops\)$' "$WORK/given.log"; then
  ok "--peak-gflops too low: kept, one warning: $(grep '^warning: MFU' "$WORK/given.log" | cut -c1-90)..."
else
  bad "--peak-gflops too low: exit $rc, $warnings warning(s)"; cat "$WORK/given.log"
fi
finish
